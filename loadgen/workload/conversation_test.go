package workload

import (
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct{ i, turns, conv, turn int }{
		{0, 3, 0, 0}, {2, 3, 0, 2}, {3, 3, 1, 0}, {7, 3, 2, 1}, {7, 1, 7, 0}, {7, 0, 7, 0},
	} {
		if conv, turn := Split(c.i, c.turns); conv != c.conv || turn != c.turn {
			t.Errorf("Split(%d, %d) = %d, %d; want %d, %d", c.i, c.turns, conv, turn, c.conv, c.turn)
		}
	}
}

func TestConversationPrompts(t *testing.T) {
	in, _ := ParseLength("in", "fixed:4")
	out, _ := ParseLength("out", "fixed:3")
	for _, tc := range []struct {
		name      string
		cfg       Config
		words     []int // prompt words of turns 1, 2, 3
		maxTokens int
		lead      string
	}{
		// Turn t resends t earlier turns of 4 + 3 words, then 4 new ones.
		{"tagged", Config{Seed: 2, Input: in, Output: out, Turns: 3, Nonce: "n", Variant: "v", IgnoreEOS: true}, []int{4, 11, 18}, 3, "-c"},
		// max_tokens caps the answers, in the history too: 4, 4+2+4, …
		{"capped answers", Config{Seed: 2, Input: in, Output: out, Turns: 3, MaxTokens: 2}, []int{4, 10, 16}, 2, "c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New(tc.cfg)
			for conv := 0; conv < 2; conv++ {
				var prev string
				for turn := 0; turn < 3; turn++ {
					i := conv*3 + turn
					r := w.Request(i)
					f := strings.Fields(r.Prompt)
					if len(f) != tc.words[turn] || r.InputTokens != tc.words[turn] || r.MaxTokens != tc.maxTokens || r.Index != i || r.IgnoreEOS != tc.cfg.IgnoreEOS {
						t.Errorf("request %d: %d words (InputTokens %d), max_tokens %d; want %d, %d", i, len(f), r.InputTokens, r.MaxTokens, tc.words[turn], tc.maxTokens)
					}
					if want := tc.lead + string(rune('0'+conv)); !strings.HasSuffix(f[0], want) || (tc.lead == "c" && f[0] != want) {
						t.Errorf("request %d starts with %q, want …%s", i, f[0], want)
					}
					// Every turn's prompt starts with the previous turn's
					// prompt, then its answer.
					if turn > 0 {
						if !strings.HasPrefix(r.Prompt, prev+" ") {
							t.Errorf("request %d does not resend request %d's prompt", i, i-1)
						}
						answer := f[len(strings.Fields(prev)) : len(strings.Fields(prev))+tc.maxTokens]
						if len(answer) != tc.maxTokens {
							t.Errorf("request %d: answer %v", i, answer)
						}
					}
					prev = r.Prompt
				}
			}
			// Conversations share nothing, not even the first word.
			if commonWords(w.Request(2).Prompt, w.Request(5).Prompt) != 0 {
				t.Error("conversations 0 and 1 share a prefix")
			}
			// Deterministic: a new workload with the same seed.
			if New(tc.cfg).Request(4).Prompt != w.Request(4).Prompt {
				t.Error("same seed, different prompt")
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, ""},
		{Config{Turns: 4}, ""},
		{Config{Trace: &Trace{}}, ""},
		{Config{Turns: -1}, "Turns must not be negative, got -1"},
		{Config{Dataset: &Dataset{}, Trace: &Trace{}}, "Dataset and Trace cannot be combined"},
		{Config{Trace: &Trace{}, Turns: 2}, "Trace and Turns cannot be combined"},
		{Config{Dataset: &Dataset{}, Turns: 2}, "Dataset and Turns cannot be combined"},
	} {
		err := tc.cfg.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
