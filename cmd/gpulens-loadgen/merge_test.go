package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestMergeCommandEmbedRequests runs `merge` with and without
// --embed-requests on four workers' reports, and merges per-node merges
// into one: the same numbers as merging the workers' reports at once.
func TestMergeCommandEmbedRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const shards, perShard = 4, 10
	var workers []string
	for i := 0; i < shards; i++ {
		run := report.Run{Name: "rate=4", Level: 4, Repeat: 1, Settings: report.Settings{Mode: report.ModeOpen, Rate: 4, Requests: perShard,
			TimeoutSeconds: 1, Endpoint: "chat", Model: "m", Seed: 1, Shard: fmt.Sprintf("%d/%d", i, shards)},
			Summary: report.Summary{RequestsCompleted: perShard}}
		for k := i; k < shards*perShard; k += shards {
			at := time.Duration(k) * 250 * time.Millisecond
			sent := at + time.Duration(k)*time.Microsecond
			first := sent + 20*time.Millisecond + time.Duration(k%7)*time.Millisecond
			run.Requests = append(run.Requests, report.Record{Index: k, Intended: at, Sent: sent,
				FirstByte: sent + 10*time.Millisecond, FirstToken: first, End: first + 30*time.Millisecond,
				Status: 200, PromptTokens: 50, OutputTokens: 4, ChunkOffsets: []time.Duration{first - sent, first - sent + time.Duration(5+k%3)*time.Millisecond},
				ChunkTokens: []int32{1, 3}})
		}
		d := &report.Document{Metadata: report.Metadata{Command: "run", Model: "m", Endpoint: "chat", Seed: 1,
			Started: time.Date(2025, 6, 1, 12, 0, i, 0, time.UTC), Shards: []string{run.Settings.Shard}}, Runs: []report.Run{run}}
		path := filepath.Join(dir, fmt.Sprintf("w%d.json", i))
		if err := d.Write(path); err != nil {
			t.Fatal(err)
		}
		workers = append(workers, path)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	logger := slog.New(slog.DiscardHandler)
	merge := func(args ...string) error {
		app := kingpin.New("t", "")
		c := mergeCommand(app)
		if _, err := app.Parse(append([]string{"merge"}, args...)); err != nil {
			t.Fatal(err)
		}
		return c.run(context.Background(), logger)
	}
	if err := merge(append([]string{p("direct.json")}, workers...)...); err != nil {
		t.Fatal(err)
	}
	direct, err := report.Read(p("direct.json"))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name    string
		steps   [][]string // merge command lines; the last one's output is checked
		records int
		err     string
	}{
		{"without --embed-requests", [][]string{append([]string{p("plain.json")}, workers...)}, 0, ""},
		{"with --embed-requests", [][]string{append([]string{p("embedded.json"), "--embed-requests"}, workers...)}, shards * perShard, ""},
		{"per-node merges merged", [][]string{
			{p("n0.json"), workers[0], workers[2], "--embed-requests"},
			{p("n1.json"), workers[3], workers[1], "--embed-requests"},
			{p("top.json"), p("n0.json"), p("n1.json")},
		}, 0, ""},
		{"merged again alone, with records", [][]string{
			{p("all.json"), "--embed-requests", workers[0], workers[1], workers[2], workers[3]},
			{p("again.json"), p("all.json"), "--embed-requests"},
		}, shards * perShard, ""},
		{"a merge without records is final", [][]string{
			{p("bare.json"), workers[0], workers[1]},
			{p("bad.json"), p("bare.json"), workers[2], workers[3]},
		}, 0, "a report merged without --embed-requests cannot be merged again (merge the workers' reports, or merge them with --embed-requests)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			for _, args := range tc.steps {
				if err = merge(args...); err != nil {
					break
				}
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			d, err := report.Read(tc.steps[len(tc.steps)-1][0])
			if err != nil {
				t.Fatal(err)
			}
			r := d.Runs[0]
			if len(d.Runs) != 1 || len(r.Requests) != tc.records || r.Settings.Shard != "" ||
				strings.Join(d.Metadata.Shards, ",") != "0/4,1/4,2/4,3/4" || len(d.Metadata.Warnings) != 0 {
				t.Fatalf("%d runs, %d records (want %d), settings.shard %q, metadata %+v", len(d.Runs), len(r.Requests), tc.records,
					r.Settings.Shard, d.Metadata)
			}
			if !reflect.DeepEqual(r.Summary, direct.Runs[0].Summary) {
				t.Errorf("summary differs from the direct merge:\n got %+v\nwant %+v", r.Summary, direct.Runs[0].Summary)
			}
		})
	}
}
