package workload

import (
	"strings"
	"testing"
)

// TestSystemPrompt: a generated system prompt has the words asked for,
// from the vocabulary, fixed by the seed; a longer one extends a shorter.
func TestSystemPrompt(t *testing.T) {
	a, b := SystemPrompt(1, 50), SystemPrompt(1, 80)
	if n := len(strings.Fields(a)); n != 50 {
		t.Fatalf("%d words, want 50", n)
	}
	if a != SystemPrompt(1, 50) || !strings.HasPrefix(b, a+" ") || a == SystemPrompt(2, 50) {
		t.Errorf("not fixed by the seed, or not a prefix: %q / %q", a, b)
	}
	in := map[string]bool{}
	for _, w := range vocabulary {
		in[w] = true
	}
	for _, w := range strings.Fields(b) {
		if !in[w] {
			t.Errorf("word %q not in the vocabulary", w)
		}
	}
}
