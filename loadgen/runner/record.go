package runner

import (
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Record converts a result into its raw record, times in nanoseconds after
// start (the run's Outcome.Start). A request in flight when the run was
// interrupted (Canceled) gets error class report.ErrInterrupted.
func Record(r *client.Result, start time.Time) report.Request {
	rel := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return int64(t.Sub(start))
	}
	rec := report.Request{Index: r.Index, IntendedNanos: rel(r.Intended), SentNanos: rel(r.Sent), FirstByteNanos: rel(r.FirstByte),
		FirstTokenNanos: rel(r.FirstToken), EndNanos: rel(r.End), Status: r.Status, ErrorClass: r.ErrorClass, Error: r.Err,
		Model: r.Model, PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens, TokensEstimated: r.TokensEstimated,
		UsageMismatch: r.UsageMismatch, KernelTimestamps: r.KernelTimestamps, ChunkTokens: r.ChunkTokens}
	if len(r.ChunkOffsets) > 0 {
		rec.ChunkOffsetsNanos = r.ChunkOffsets
	}
	if r.Canceled {
		rec.ErrorClass = report.ErrInterrupted
	}
	return rec
}

// FromRecord is the inverse of Record: the result as measured, with times
// counted from start. Summarize gives the same summary for the converted
// records as for the original results.
func FromRecord(rec *report.Request, start time.Time) client.Result {
	abs := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return start.Add(time.Duration(ns))
	}
	r := client.Result{Index: rec.Index, Intended: start.Add(time.Duration(rec.IntendedNanos)), Sent: start.Add(time.Duration(rec.SentNanos)),
		FirstByte: abs(rec.FirstByteNanos), FirstToken: abs(rec.FirstTokenNanos), End: start.Add(time.Duration(rec.EndNanos)),
		Status: rec.Status, ErrorClass: rec.ErrorClass, Err: rec.Error, Model: rec.Model, PromptTokens: rec.PromptTokens,
		OutputTokens: rec.OutputTokens, TokensEstimated: rec.TokensEstimated, UsageMismatch: rec.UsageMismatch,
		KernelTimestamps: rec.KernelTimestamps, ChunkOffsets: rec.ChunkOffsetsNanos, ChunkTokens: rec.ChunkTokens}
	if rec.Interrupted() {
		r.ErrorClass, r.Canceled = "", true
	}
	return r
}
