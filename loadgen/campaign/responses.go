package campaign

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// responder sends requests with the client and keeps what each answer
// said (Options.SaveResponses), by request index, for one run.
type responder struct {
	client     *client.Client
	work       *workload.Workload
	keepPrompt bool
	mu         sync.Mutex
	byIndex    map[int]*report.Answer
}

// doer is what a run sends its requests with: the client, or, to save the
// responses, a responder over it (nil otherwise).
func (c *Campaign) doer(work *workload.Workload) (runner.Doer, *responder) {
	if !c.opt.SaveResponses {
		return c.client, nil
	}
	r := &responder{client: c.client, work: work, keepPrompt: c.opt.ResponsePrompts, byIndex: map[int]*report.Answer{}}
	return r, r
}

// Do sends req and keeps its answer's text.
func (r *responder) Do(ctx context.Context, req client.Request, start, intended time.Time) report.Record {
	rec, text := r.client.DoText(ctx, req, start, intended)
	sum := sha256.Sum256([]byte(req.Prompt))
	x := &report.Answer{PromptSHA256: hex.EncodeToString(sum[:]), Response: text.Content,
		Reasoning: text.Reasoning, FinishReason: text.FinishReason}
	if r.keepPrompt {
		x.Prompt = req.Prompt
	}
	if e, ok := r.work.Entry(req.Index); ok {
		x.DatasetRow, x.ID, x.Reference = e.Row, e.ID, e.Reference
	}
	r.mu.Lock()
	r.byIndex[req.Index] = x
	r.mu.Unlock()
	return rec
}

// responses are the saved responses of a run's measured requests: its
// records that have an answer, named (Run, Level, Repeat) and with the
// Answer set, in index order.
func (r *responder) responses(name string, level float64, rep int, recs []report.Record) []report.Record {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]report.Record, 0, len(recs))
	for _, rec := range recs {
		x, ok := r.byIndex[rec.Index]
		if !ok {
			continue
		}
		rec.Run, rec.Level, rec.Repeat, rec.Answer = name, level, rep, x
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b report.Record) int { return a.Index - b.Index })
	return out
}
