package workload

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseLength(t *testing.T) {
	l, err := ParseLength("--input-tokens", "normal:512,64,min=100,max=600")
	if err != nil || l.Kind != "normal" || l.A != 512 || l.B != 64 || l.Min != 100 || l.Max != 600 {
		t.Fatalf("got %+v, %v", l, err)
	}
	for _, bad := range []string{"zipf:1", "fixed:", "fixed:1,2", "uniform:9,3", "normal:5,1,min=x", "fixed:5,max=1,min=3", "fixed:-4", "fixed:5,foo=1"} {
		if _, err := ParseLength("--input-tokens", bad); err == nil || !strings.Contains(err.Error(), "--input-tokens") {
			t.Errorf("%q: err = %v", bad, err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	u, _ := ParseLength("f", "uniform:10,12")
	for i := 0; i < 1000; i++ {
		if v := u.Sample(rng); v < 10 || v > 12 {
			t.Fatalf("uniform sample %d", v)
		}
	}
	c, _ := ParseLength("f", "lognormal:100,2,min=50,max=60")
	for i := 0; i < 1000; i++ {
		if v := c.Sample(rng); v < 50 || v > 60 {
			t.Fatalf("clamped sample %d", v)
		}
	}
}

func TestSyntheticDeterministic(t *testing.T) {
	in, _ := ParseLength("in", "fixed:32")
	out, _ := ParseLength("out", "uniform:10,100")
	w := New(Config{Seed: 9, Input: in, Output: out, MaxTokens: 50})
	r := w.Request(5)
	if got := len(strings.Fields(r.Prompt)); got != 32 || r.InputTokens != 32 {
		t.Fatalf("prompt has %d words, InputTokens %d", got, r.InputTokens)
	}
	if r.MaxTokens < 10 || r.MaxTokens > 50 || r.Index != 5 {
		t.Fatalf("request %+v", r)
	}
	if !reflect.DeepEqual(r, New(Config{Seed: 9, Input: in, Output: out, MaxTokens: 50}).Request(5)) {
		t.Fatal("same seed and index gave a different request")
	}
	if reflect.DeepEqual(r, New(Config{Seed: 10, Input: in, Output: out, MaxTokens: 50}).Request(5)) {
		t.Fatal("different seed gave the same request")
	}
}

func TestDatasets(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "p.jsonl")
	os.WriteFile(jsonl, []byte("{\"prompt\":\"a b c\",\"output_tokens\":7}\n\n{\"text\":\"d e\"}\n"), 0o600)
	d, err := LoadDataset(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Entries) != 2 || d.Entries[0].OutputTokens != 7 || d.Entries[1].Prompt != "d e" || len(d.SHA256) != 64 || d.Name != "p.jsonl" {
		t.Fatalf("dataset = %+v", d)
	}
	share := filepath.Join(dir, "sg.json")
	os.WriteFile(share, []byte(`[{"conversations":[{"from":"human","value":"hi there"},{"from":"gpt","value":"one two three"}]},{"conversations":[{"from":"gpt","value":"x"}]}]`), 0o600)
	d, err = LoadDataset(share)
	if err != nil || len(d.Entries) != 1 || d.Entries[0].Prompt != "hi there" || d.Entries[0].Reply != "one two three" || d.Entries[0].OutputTokens != 0 {
		t.Fatalf("sharegpt = %+v, %v", d, err)
	}
	out, _ := ParseLength("out", "fixed:4")
	w := New(Config{Seed: 1, Dataset: d, Output: out})
	// Uncalibrated: one token per word of the reply.
	if r := w.Request(3); r.Prompt != "hi there" || r.MaxTokens != 3 || r.InputTokens != 2 {
		t.Fatalf("request = %+v", r)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"prompt\":\"ok\"}\n{\"nope\":1}\n"), 0o600)
	if _, err := LoadDataset(bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad dataset err = %v", err)
	}
}

// TestPromptsDistinctAcrossRuns: a nonce and a variant change only the
// first word of every prompt (so no prefix cache can serve one run from
// another's prompts); the seed still fixes lengths and the other words;
// the same seed, nonce and variant replay the prompts byte for byte.
func TestPromptsDistinctAcrossRuns(t *testing.T) {
	in, _ := ParseLength("in", "uniform:4,40")
	out, _ := ParseLength("out", "uniform:10,100")
	base := Config{Seed: 9, Input: in, Output: out}
	run := func(nonce, variant string) *Workload {
		c := base
		c.Nonce = nonce
		return New(c).WithVariant(variant)
	}
	plain := New(base)
	runs := []*Workload{
		run("0123456789abcdef", "concurrency=4 repeat=1"),
		run("0123456789abcdef", "concurrency=4 repeat=2"),
		run("0123456789abcdef", "concurrency=8 repeat=1"),
		run("fedcba9876543210", "concurrency=4 repeat=1"),
		run("0123456789abcdef", ""),
	}
	for i := 0; i < 50; i++ {
		want := plain.Request(i)
		first := map[string]int{strings.Fields(want.Prompt)[0]: -1}
		for k, w := range runs {
			r := w.Request(i)
			if r.InputTokens != want.InputTokens || r.MaxTokens != want.MaxTokens || r.Index != i {
				t.Fatalf("run %d request %d: lengths %d/%d, want the seed's %d/%d", k, i, r.InputTokens, r.MaxTokens, want.InputTokens, want.MaxTokens)
			}
			words, wantWords := strings.Fields(r.Prompt), strings.Fields(want.Prompt)
			if len(words) != r.InputTokens || !reflect.DeepEqual(words[1:], wantWords[1:]) {
				t.Fatalf("run %d request %d: %q, want %d words ending like %q", k, i, r.Prompt, r.InputTokens, want.Prompt)
			}
			if !strings.HasSuffix(words[0], "-"+strconv.Itoa(i)) {
				t.Fatalf("run %d request %d: first word %q does not end in the index", k, i, words[0])
			}
			if prev, dup := first[words[0]]; dup {
				t.Fatalf("request %d: runs %d and %d share the first word %q", i, prev, k, words[0])
			}
			first[words[0]] = k
			if again := run(w.cfg.Nonce, w.cfg.Variant).Request(i); !reflect.DeepEqual(again, r) {
				t.Fatalf("run %d request %d: replay gave %q, want %q", k, i, again.Prompt, r.Prompt)
			}
		}
	}
	// Replays across versions: the tag's derivation is part of the
	// contract of metadata.prompt_nonce (changed once, by issue 23: decimal
	// tags and a vocabulary of one-token words, so that prompts have the
	// server's token lengths; reports from before replay other prompts).
	fixed, _ := ParseLength("in", "fixed:6")
	w := New(Config{Seed: 9, Input: fixed, Output: out, Nonce: "0123456789abcdef"}).WithVariant("concurrency=4 repeat=2")
	if got := w.Request(5).Prompt; got != "2218125677-5 they that but into some" {
		t.Errorf("prompt = %q, want the one this seed, nonce and variant always gave", got)
	}
}

func TestDatasetPromptsTagged(t *testing.T) {
	d := &Dataset{Name: "d", Entries: []Entry{{Prompt: "hi there", OutputTokens: 3}}}
	out, _ := ParseLength("out", "fixed:4")
	plain := New(Config{Seed: 1, Dataset: d, Output: out}).Request(3)
	tagged := New(Config{Seed: 1, Dataset: d, Output: out, Nonce: "n1"}).WithVariant("rate=2 repeat=1").Request(3)
	if plain.Prompt != "hi there" || plain.InputTokens != 2 {
		t.Fatalf("untagged dataset prompt = %+v, want the file's text", plain)
	}
	head, rest, _ := strings.Cut(tagged.Prompt, " ")
	if rest != "hi there" || !strings.HasSuffix(head, "-3") || len(head) != len("0123456789-3") || tagged.InputTokens != 3 || tagged.MaxTokens != 3 {
		t.Fatalf("tagged dataset prompt = %+v, want TAG-3 then the file's text", tagged)
	}
}

func TestValidateNonce(t *testing.T) {
	for _, tc := range []struct {
		nonce string
		ok    bool
	}{
		{"0123456789abcdef", true}, {"run-7_B", true}, {strings.Repeat("a", 64), true},
		{"", false}, {strings.Repeat("a", 65), false}, {"has space", false}, {"tab\t", false}, {"é", false}, {"a/b", false},
	} {
		if err := ValidateNonce(tc.nonce); (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "prompt nonce")) {
			t.Errorf("ValidateNonce(%q) = %v, want ok %v", tc.nonce, err, tc.ok)
		}
	}
}
