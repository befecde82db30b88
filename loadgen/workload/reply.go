package workload

import (
	"math"
	"strings"
)

// Which of a dataset's prompts are sent (Config.DatasetTurns).
const (
	DatasetTurnsFirst = "first"
	DatasetTurnsAll   = "all"
)

// Replies converts a dataset row's reply (Entry.Reply) to an output
// length in the server's tokens, from a calibration against the server
// (loadgen/campaign): the replies it counted, by their index in
// Dataset.Entries, and the tokens per word of all of them together for
// the others. The zero value is one token per word.
type Replies struct {
	TokensPerWord float64
	Counted       map[int]int
}

// Tokens is the output length of entry k, whose reply is reply: the
// server's count when it counted it, else its words × TokensPerWord
// (at least 1).
func (r Replies) Tokens(k int, reply string) int {
	if n, ok := r.Counted[k]; ok {
		return max(n, 1)
	}
	per := r.TokensPerWord
	if per <= 0 {
		per = 1
	}
	return max(1, int(math.Round(per*float64(len(strings.Fields(reply))))))
}

// WithReplies returns the workload with its reply conversion set.
func (w *Workload) WithReplies(r Replies) *Workload {
	c := *w
	c.cfg.Replies = r
	return &c
}

// ReplySample is up to n entries whose reply sets their output length
// (a reply and no output_tokens), by index in Dataset.Entries, in the
// order the requests send them: the ones a calibration counts.
func (w *Workload) ReplySample(n int) []int {
	d := w.cfg.Dataset
	if d == nil {
		return nil
	}
	var out []int
	seen := map[int]bool{}
	for _, k := range w.perm {
		if e := &d.Entries[k]; e.Reply != "" && e.OutputTokens == 0 && !seen[k] {
			seen[k] = true
			out = append(out, k)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// HasReplies reports whether a dataset sends requests whose output length
// is a reply's (which a calibration can count in the server's tokens).
func (w *Workload) HasReplies() bool { return len(w.ReplySample(1)) > 0 }
