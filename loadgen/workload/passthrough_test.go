package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDatasetPassThrough: a dataset row's id and reference (or expected)
// are kept as written, with where the row is in the file; they never
// change the prompt.
func TestDatasetPassThrough(t *testing.T) {
	for _, tc := range []struct {
		name, file, text string
		want             []Entry
		err              string
	}{
		{"jsonl", "p.jsonl", `{"prompt":"a","id":"q-1","reference":{"answer": [1, 2]}}` + "\n\n" +
			`{"text":"b","id":17,"expected":"Paris"}` + "\n" +
			`{"prompt":"c","id":null,"reference":null,"expected":"x"}` + "\n" +
			`{"prompt":"d","reference":"r","expected":"e"}` + "\n",
			[]Entry{
				{Prompt: "a", Row: 1, ID: "q-1", Reference: []byte(`{"answer":[1,2]}`)},
				{Prompt: "b", Row: 3, ID: "17", Reference: []byte(`"Paris"`)},
				{Prompt: "c", Row: 4, Reference: []byte(`"x"`)},
				{Prompt: "d", Row: 5, Reference: []byte(`"r"`)},
			}, ""},
		{"sharegpt", "s.json", `[{"id":"c1","conversations":[{"from":"gpt","value":"x"}]},` +
			`{"id":"c2","reference":"ok","conversations":[{"from":"human","value":"hi"},{"from":"gpt","value":"one two"}]}]`,
			[]Entry{{Prompt: "hi", Reply: "one two", Row: 2, ID: "c2", Reference: []byte(`"ok"`)}}, ""},
		{"bad id", "b.jsonl", `{"prompt":"a"}` + "\n" + `{"prompt":"b","id":{"x":1}}` + "\n", nil, `line 2: "id" must be a string or a number, got {"x":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tc.file)
			if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
				t.Fatal(err)
			}
			d, err := LoadDataset(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Entries) != len(tc.want) {
				t.Fatalf("entries %+v, want %+v", d.Entries, tc.want)
			}
			for i, e := range d.Entries {
				w := tc.want[i]
				if e.Prompt != w.Prompt || e.OutputTokens != w.OutputTokens || e.Reply != w.Reply || e.Row != w.Row || e.ID != w.ID || string(e.Reference) != string(w.Reference) {
					t.Errorf("entry %d = %+v (reference %s), want %+v (reference %s)", i, e, e.Reference, w, w.Reference)
				}
			}
		})
	}
}

// TestWorkloadEntry: Entry(i) is the row request i sends.
func TestWorkloadEntry(t *testing.T) {
	d := &Dataset{Entries: []Entry{{Prompt: "p0", Row: 1, ID: "a"}, {Prompt: "p1", Row: 2, ID: "b"}, {Prompt: "p2", Row: 3, ID: "c"}}}
	out, _ := ParseLength("out", "fixed:4")
	w := New(Config{Seed: 9, Dataset: d, Output: out})
	for i := range 7 {
		e, ok := w.Entry(i)
		if !ok || w.Request(i).Prompt != e.Prompt {
			t.Errorf("request %d sends %q, Entry says %+v (%v)", i, w.Request(i).Prompt, e, ok)
		}
	}
	in, _ := ParseLength("in", "fixed:4")
	if _, ok := New(Config{Seed: 9, Input: in, Output: out}).Entry(0); ok {
		t.Error("a synthetic workload has a dataset entry")
	}
}
