package campaign

import (
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestMergeNoncesAndInterrupted: the merged report keeps the workers'
// prompt nonce when they share one, names each input's when they differ
// (no single nonce replays the merged run), and counts the records of
// requests interrupted on a worker as interrupted, not as failures.
func TestMergeNoncesAndInterrupted(t *testing.T) {
	t.Parallel()
	worker := func(shard, nonce string, recs ...report.Record) *report.Document {
		return &report.Document{Metadata: report.Metadata{Command: "run", Seed: 1, Model: "m", PromptNonce: nonce}, Runs: []report.Run{{
			Name: "rate=1", Level: 1, Repeat: 1, Settings: report.Settings{Mode: report.ModeOpen, Rate: 1, Shard: shard, Seed: 1, Prompts: report.PromptsDistinct},
			Summary: report.Summary{RequestsCompleted: len(recs)}, Requests: recs}}}
	}
	ok0 := report.Record{Index: 0, Sent: 1, FirstToken: 5, End: 9, Status: 200, OutputTokens: 1, ChunkOffsets: []time.Duration{4}, ChunkTokens: []int32{1}}
	cut1 := report.Record{Index: 1, Sent: 2, End: 7, ErrorClass: report.ErrInterrupted, Error: "context canceled"}
	for _, tc := range []struct {
		name      string
		a, b      string
		wantNonce string
		warn      string
	}{
		{"one nonce", "n1", "n1", "n1", ""},
		{"two nonces", "n1", "n2", "", `inputs sent prompts of different nonces, "n1" (a.json), "n2" (b.json)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Merge([]Input{{Name: "a.json", Doc: worker("0/2", tc.a, ok0)}, {Name: "b.json", Doc: worker("1/2", tc.b, cut1)}}, MergeOptions{EmbedRequests: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.Metadata.PromptNonce != tc.wantNonce {
				t.Errorf("prompt nonce %q, want %q", d.Metadata.PromptNonce, tc.wantNonce)
			}
			warned := strings.Join(d.Metadata.Warnings, "\n")
			if tc.warn == "" && strings.Contains(warned, "nonce") || tc.warn != "" && !strings.Contains(warned, tc.warn) {
				t.Errorf("warnings %q, want %q", d.Metadata.Warnings, tc.warn)
			}
			s := d.Runs[0].Summary
			if s.RequestsCompleted != 1 || s.RequestsFailed != 0 || s.RequestsInterrupted != 1 || len(s.Errors) != 0 {
				t.Errorf("summary completed %d failed %d interrupted %d errors %v, want 1, 0, 1", s.RequestsCompleted, s.RequestsFailed, s.RequestsInterrupted, s.Errors)
			}
			if recs := d.Runs[0].Requests; len(recs) != 2 || recs[1].ErrorClass != report.ErrInterrupted {
				t.Errorf("embedded records %+v, want the interrupted one kept as such", recs)
			}
		})
	}
}
