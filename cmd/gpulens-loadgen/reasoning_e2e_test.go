package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/render"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestReasoningAgainstSim: a run against the simulator acting as a
// reasoning model (4 thinking tokens of 8, two tokens per chunk after the
// first: chunks of tokens 0, 1–2, 3–4, 5–6 and 7, the third holding the
// last thought and the first answer token) tells the reasoning from the
// answer exactly, by the simulator's per-chunk counts: every record has
// 4 reasoning tokens [1 2 1 0 0], 4 answer tokens,
// the first answer token no earlier than the first token; the summary's
// reasoning side and the console say which TTFT is which.
func TestReasoningAgainstSim(t *testing.T) {
	// Not parallel: it asserts no timing, but its load would stretch the
	// timing of the parallel end-to-end tests (TestShardsAgainstSimMergeAndReport
	// counts the tokens that arrive apart from the first).
	const reqs = 6
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: 10 * time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 2,
		RoleChunk: true, ReasoningTokens: 4, Seed: 1}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "r.json")
	app := kingpin.New("t", "")
	c := runCommand(app)
	if _, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", simserver.DefaultModel,
		"--concurrency", "2", "--requests", "6", "--input-tokens", "fixed:16", "--output-tokens", "fixed:8", "--ignore-eos",
		"--continuous-usage", "--embed-requests", "--output", out, "--no-progress"}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	r := d.Runs[0]
	if len(r.Requests) != reqs {
		t.Fatalf("%d records, want %d", len(r.Requests), reqs)
	}
	for _, rec := range r.Requests {
		if !rec.OK() || rec.OutputTokens != 8 || rec.ReasoningTokens != 4 || rec.AnswerTokens() != 4 ||
			fmt.Sprint(rec.ChunkTokens) != "[1 2 2 2 1]" || fmt.Sprint(rec.ChunkReasoningTokens) != "[1 2 1 0 0]" ||
			rec.FirstAnswerToken < rec.FirstToken || rec.FirstToken == 0 || rec.FirstAnswerToken != rec.Sent+rec.ChunkOffsets[2] {
			t.Errorf("record %d: ok %v, %d tokens %v, %d reasoning %v, answer %d, first token %v, first answer %v, chunks at %v", rec.Index, rec.OK(),
				rec.OutputTokens, rec.ChunkTokens, rec.ReasoningTokens, rec.ChunkReasoningTokens, rec.AnswerTokens(), rec.FirstToken,
				rec.FirstAnswerToken, rec.ChunkOffsets)
		}
	}
	rs := r.Summary.Reasoning
	if rs == nil || rs.Requests != reqs || rs.ReasoningTokensTotal != 4*reqs || rs.AnswerTokensTotal != 4*reqs || rs.AnswerTTFT.Count != reqs ||
		rs.AnswerTTFT.P50 < r.Summary.TTFT.P50 || rs.AnswerTPOT.Count != reqs {
		t.Fatalf("reasoning side %+v (TTFT p50 %v)", rs, r.Summary.TTFT.P50)
	}
	var con bytes.Buffer
	render.WriteTable(&con, d)
	if !strings.Contains(con.String(), "TTFT p50 ms (answer)") || !strings.Contains(con.String(), "counts the first token of any kind") {
		t.Errorf("console:\n%s", con.String())
	}
}
