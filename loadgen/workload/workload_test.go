package workload

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
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
	if err != nil || len(d.Entries) != 1 || d.Entries[0].Prompt != "hi there" || d.Entries[0].OutputTokens != 3 {
		t.Fatalf("sharegpt = %+v, %v", d, err)
	}
	out, _ := ParseLength("out", "fixed:4")
	w := New(Config{Seed: 1, Dataset: d, Output: out})
	if r := w.Request(3); r.Prompt != "hi there" || r.MaxTokens != 3 || r.InputTokens != 2 {
		t.Fatalf("request = %+v", r)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte("{\"prompt\":\"ok\"}\n{\"nope\":1}\n"), 0o600)
	if _, err := LoadDataset(bad); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("bad dataset err = %v", err)
	}
}
