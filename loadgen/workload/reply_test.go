package workload

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/client"
)

// shareGPT is a conversation of three human turns (the second answered by
// a "chatgpt" turn, the last unanswered) after a system turn, and one of
// a single turn.
const shareGPT = `[
 {"id":"a","conversations":[{"from":"system","value":"be kind"},{"from":"human","value":"q1"},{"from":"gpt","value":"a1 a1"},
   {"from":"human","value":"q2"},{"from":"chatgpt","value":"a2 a2 a2"},{"from":"human","value":"q3"}]},
 {"id":"b","conversations":[{"from":"user","value":"solo"},{"from":"assistant","value":"r r r r"}]}
]`

// TestShareGPTAllTurns: every human turn is an entry with the turns
// before it as its history and the next assistant turn as its reply;
// DatasetTurns first sends each conversation's first turn only (as
// before), all every turn, with its history before the prompt.
func TestShareGPTAllTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(path, []byte(shareGPT), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDataset(path)
	if err != nil {
		t.Fatal(err)
	}
	sys, u1, a1, u2, a2 := client.Message{Role: "system", Content: "be kind"}, client.Message{Role: "user", Content: "q1"},
		client.Message{Role: "assistant", Content: "a1 a1"}, client.Message{Role: "user", Content: "q2"}, client.Message{Role: "assistant", Content: "a2 a2 a2"}
	want := []Entry{
		{Prompt: "q1", Reply: "a1 a1", History: []client.Message{sys}, Turn: 0, Row: 1, ID: "a"},
		{Prompt: "q2", Reply: "a2 a2 a2", History: []client.Message{sys, u1, a1}, Turn: 1, Row: 1, ID: "a"},
		{Prompt: "q3", History: []client.Message{sys, u1, a1, u2, a2}, Turn: 2, Row: 1, ID: "a"},
		{Prompt: "solo", Reply: "r r r r", History: []client.Message{}, Turn: 0, Row: 2, ID: "b"},
	}
	if len(d.Entries) != len(want) {
		t.Fatalf("%d entries, want %d: %+v", len(d.Entries), len(want), d.Entries)
	}
	for i, e := range d.Entries {
		if len(e.History) == 0 {
			e.History = []client.Message{}
		}
		if !reflect.DeepEqual(e, want[i]) {
			t.Errorf("entry %d = %+v\nwant %+v", i, e, want[i])
		}
	}
	out, _ := ParseLength("out", "fixed:9")
	prompts := func(turns string) map[string]client.Request {
		w := New(Config{Seed: 1, Dataset: d, Output: out, DatasetTurns: turns})
		m := map[string]client.Request{}
		for i := range 8 {
			r := w.Request(i)
			m[r.Prompt] = r
		}
		return m
	}
	first, all := prompts(DatasetTurnsFirst), prompts(DatasetTurnsAll)
	if len(first) != 2 || first["q1"].Prompt == "" || first["solo"].Prompt == "" {
		t.Errorf("first turns: prompts %v", first)
	}
	if len(all) != 4 {
		t.Errorf("all turns: %d distinct prompts, want 4", len(all))
	}
	// q2: its history before it, its reply's words as the output length
	// (uncalibrated), every message's words counted as input.
	if r := all["q2"]; !reflect.DeepEqual(r.History, []client.Message{sys, u1, a1}) || r.MaxTokens != 3 || r.InputTokens != 1+2+1+2 {
		t.Errorf("q2: %+v", r)
	}
	// q3 has no reply: the output length distribution.
	if r := all["q3"]; r.MaxTokens != 9 {
		t.Errorf("q3: max tokens %d, want 9 from --output-tokens", r.MaxTokens)
	}
	// A tag leads the conversation's first message, not the prompt.
	w := New(Config{Seed: 1, Dataset: d, Output: out, DatasetTurns: DatasetTurnsAll, Nonce: "n1"})
	for i := range 8 {
		r := w.Request(i)
		if len(r.History) > 0 && (!strings.HasSuffix(r.History[0].Content, " be kind") || strings.Contains(r.Prompt, "-")) {
			t.Errorf("request %d: history %v, prompt %q: the tag leads the first message", i, r.History, r.Prompt)
		}
		if d.Entries[0].History[0].Content != "be kind" {
			t.Fatal("the tag changed the dataset")
		}
	}
}

// TestRepliesInServerTokens: a reply's output length is the server's
// count where it counted it, else its words times the tokens per word
// fitted; ReplySample lists the replies in the order they are sent.
func TestRepliesInServerTokens(t *testing.T) {
	r := Replies{TokensPerWord: 1.5, Counted: map[int]int{3: 341}}
	if got := r.Tokens(3, "ninety words"); got != 341 {
		t.Errorf("counted reply: %d, want 341", got)
	}
	if got := r.Tokens(4, "one two three four five"); got != 8 { // 7.5 rounds to 8
		t.Errorf("fitted: %d, want 8", got)
	}
	if got := (Replies{}).Tokens(0, "one two three"); got != 3 {
		t.Errorf("zero value: %d, want 3 (one per word)", got)
	}
	path := filepath.Join(t.TempDir(), "p.jsonl")
	if err := os.WriteFile(path, []byte(`{"prompt":"p0","completion":"c c"}`+"\n"+`{"prompt":"p1","output_tokens":5,"response":"x"}`+"\n"+
		`{"prompt":"p2","response":"r r r"}`+"\n"+`{"prompt":"p3"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := LoadDataset(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Entries[0].Reply != "c c" || d.Entries[1].OutputTokens != 5 || d.Entries[2].Reply != "r r r" {
		t.Fatalf("entries %+v", d.Entries)
	}
	w := New(Config{Seed: 2, Dataset: d})
	sample := w.ReplySample(10)
	if len(sample) != 2 || !w.HasReplies() {
		t.Fatalf("sample %v: want entries 0 and 2 (1 has output_tokens, 3 no reply)", sample)
	}
	if slices.Index(w.perm, sample[1]) < slices.Index(w.perm, sample[0]) {
		t.Errorf("sample %v not in send order %v", sample, w.perm)
	}
	w = w.WithReplies(Replies{TokensPerWord: 2, Counted: map[int]int{0: 7}})
	for i := range 4 {
		r := w.Request(i)
		want := map[string]int{"p0": 7, "p1": 5, "p2": 6}[r.Prompt]
		if want != 0 && r.MaxTokens != want {
			t.Errorf("%s: max tokens %d, want %d", r.Prompt, r.MaxTokens, want)
		}
	}
}
