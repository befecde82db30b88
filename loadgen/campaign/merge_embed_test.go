package campaign

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// writeRead writes d to dir/name and reads it back, so that every input
// went through the JSON a real merge reads.
func writeRead(t *testing.T, dir, name string, d *report.Document) Input {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := d.Write(path); err != nil {
		t.Fatal(err)
	}
	got, err := report.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	return Input{Name: name, Doc: got}
}

// workerDoc is shard sh's report of the runs, which embed records (times
// counted from the worker's own start).
func workerDoc(command string, sh runner.Shard, start time.Time, runs []report.Run, records [][]report.Record) *report.Document {
	d := &report.Document{Metadata: report.Metadata{Command: command, Model: "m", Endpoint: "chat", Seed: 3, Started: start,
		Finished: start.Add(time.Minute), Shards: []string{sh.String()}}}
	var reps []report.Run
	for i, r := range runs {
		r.Requests = records[i]
		d.Runs = append(d.Runs, r)
		reps = append(reps, r)
		if i+1 == len(runs) || runs[i+1].Level != r.Level {
			if len(reps) > 1 {
				d.Runs = append(d.Runs, stats.Aggregate(reps))
			}
			reps = nil
		}
	}
	if sh.Index == 1 {
		d.Metadata.Warnings = []string{"exporter unreachable"}
	}
	return d
}

// openWorkers are the reports of shards workers that split a seeded
// Poisson schedule of n requests at 40/s, each starting at its own moment.
func openWorkers(t *testing.T, dir string, n, shards int) []Input {
	t.Helper()
	const rate = 40.0
	offsets := runner.Generate(runner.ScheduleConfig{Rate: rate, Arrival: runner.Poisson, Seed: 3}, n, 0)
	var in []Input
	for i := 0; i < shards; i++ {
		sh := runner.Shard{Index: i, Count: shards}
		st := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * 211 * time.Millisecond)
		var res []report.Record
		for k, off := range offsets {
			if sh.Owns(k) {
				res = append(res, synth(k, off))
			}
		}
		set := report.Settings{Mode: report.ModeOpen, Rate: rate, Arrival: runner.Poisson, Requests: n / shards, TimeoutSeconds: 1,
			Endpoint: "chat", Model: "m", Seed: 3, Shard: sh.String(), SLO: report.SLO{TTFTSeconds: 0.05, TPOTSeconds: 0.012},
			Cost: report.CostSettings{GPUHourlyUSD: 2.5, GPUs: 2}}
		sum := stats.Summarize(res, stats.SummaryConfig{SLO: set.SLO, Prices: report.CostSettings{GPUHourlyUSD: 2.5, GPUs: 2},
			TargetRate: rate / float64(shards)})
		sum.MaxInFlight, sum.WarmupRequests = 3+i, i
		run := report.Run{Name: "rate=40", Settings: set, Summary: sum, Level: rate, Repeat: 1}
		d := workerDoc("run", sh, st, []report.Run{run}, [][]report.Record{res})
		if shards == 1 {
			// One process with --embed-requests, no --shard.
			d.Runs[0].Settings.Shard, d.Metadata.Shards = "", nil
		}
		in = append(in, writeRead(t, dir, fmt.Sprintf("w%d.json", i), d))
	}
	return in
}

// closedWorkers are the reports of a closed-loop sweep (levels u and 2u
// users, 2 repeats, 0.25 s warmup) by len(users) workers, worker i with
// users[i] users: 30 requests per worker and run.
func closedWorkers(t *testing.T, dir string, users []int) []Input {
	t.Helper()
	shards := len(users)
	var in []Input
	for i, u := range users {
		sh := runner.Shard{Index: i, Count: shards}
		st := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * 97 * time.Millisecond)
		var runs []report.Run
		var results [][]report.Record
		for _, level := range []int{u, 2 * u} {
			for rep := 1; rep <= 2; rep++ {
				var res []report.Record
				for k := i; k < 30*shards; k += shards {
					r := synth(k+level+rep, time.Duration(k)*7*time.Millisecond)
					r.Index = k
					res = append(res, r)
				}
				set := report.Settings{Mode: report.ModeClosed, Concurrency: level, WarmupSeconds: 0.25, TimeoutSeconds: 1, Endpoint: "chat",
					Model: "m", Seed: 3, Shard: sh.String(), SLO: report.SLO{TTFTSeconds: 0.05}}
				sum := stats.Summarize(res, stats.SummaryConfig{SLO: set.SLO, Warmup: 250 * time.Millisecond})
				sum.MaxInFlight, sum.WarmupRequests = level, 1
				runs = append(runs, report.Run{Name: fmt.Sprintf("concurrency=%d repeat=%d", level, rep), Settings: set, Summary: sum,
					Level: float64(level), Repeat: rep})
				results = append(results, res)
			}
		}
		in = append(in, writeRead(t, dir, fmt.Sprintf("w%d.json", i), workerDoc("sweep", sh, st, runs, results)))
	}
	return in
}

// measured returns the non-aggregate runs of d in order.
func measured(d *report.Document) []report.Run {
	var out []report.Run
	for _, r := range d.Runs {
		if !r.Aggregate {
			out = append(out, r)
		}
	}
	return out
}

// TestMergeEmbedRequests merges with and without --embed-requests: the
// numbers are the same; with it, every merged run carries exactly the
// union of the shards' records, unchanged (each shard's times count from
// its own start, as the schedule's offsets do), sorted by index, and
// summarising them gives the merged summary.
func TestMergeEmbedRequests(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		workers func(t *testing.T, dir string) []Input
	}{
		{"open loop, 4 shards", func(t *testing.T, dir string) []Input { return openWorkers(t, dir, 400, 4) }},
		{"closed-loop sweep, 3 shards, unequal users", func(t *testing.T, dir string) []Input { return closedWorkers(t, dir, []int{1, 2, 3}) }},
		{"one process with --embed-requests", func(t *testing.T, dir string) []Input { return openWorkers(t, dir, 100, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.workers(t, t.TempDir())
			plain, err := Merge(in, MergeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			embedded, err := Merge(in, MergeOptions{EmbedRequests: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(plain.Runs) != len(embedded.Runs) || len(plain.Runs) == 0 {
				t.Fatalf("%d runs without, %d with --embed-requests", len(plain.Runs), len(embedded.Runs))
			}
			for i, r := range plain.Runs {
				if r.Requests != nil {
					t.Errorf("without --embed-requests: run %q has %d records", r.Name, len(r.Requests))
				}
				e := embedded.Runs[i]
				if e.Aggregate && e.Requests != nil {
					t.Errorf("aggregate run %q has %d records", e.Name, len(e.Requests))
				}
				e.Requests = nil
				if !reflect.DeepEqual(r, e) {
					t.Errorf("run %d differs with --embed-requests:\n got %+v\nwant %+v", i, e, r)
				}
			}
			if !reflect.DeepEqual(plain.Metadata, embedded.Metadata) {
				t.Errorf("metadata differs with --embed-requests:\n got %+v\nwant %+v", embedded.Metadata, plain.Metadata)
			}

			if len(in) == 1 {
				// A whole schedule merged on its own: the same numbers.
				if got, want := measured(embedded)[0].Summary, measured(in[0].Doc)[0].Summary; !reflect.DeepEqual(got, want) {
					t.Errorf("one report merged:\n got %+v\nwant %+v", got, want)
				}
			}
			for j, m := range measured(embedded) {
				// The union of the shards' records of this run.
				want := map[int]report.Record{}
				for _, inp := range in {
					for _, rec := range measured(inp.Doc)[j].Requests {
						want[rec.Index] = rec
					}
				}
				if len(m.Requests) != len(want) || len(want) != m.Summary.RequestsCompleted+m.Summary.RequestsFailed {
					t.Fatalf("%s: %d records, want the shards' %d (summary: %d requests)", m.Name, len(m.Requests), len(want),
						m.Summary.RequestsCompleted+m.Summary.RequestsFailed)
				}
				for i := range m.Requests {
					rec := m.Requests[i]
					if i > 0 && rec.Index <= m.Requests[i-1].Index {
						t.Fatalf("%s: record %d has index %d after %d", m.Name, i, rec.Index, m.Requests[i-1].Index)
					}
					if !reflect.DeepEqual(rec, want[rec.Index]) {
						t.Fatalf("%s: record %d:\n got %+v\nwant %+v", m.Name, rec.Index, rec, want[rec.Index])
					}
				}
				target := 0.0
				if m.Settings.Mode == report.ModeOpen {
					target = m.Settings.Rate
				}
				sum := stats.Summarize(m.Requests, stats.SummaryConfig{SLO: m.Settings.SLO,
					Prices:     report.CostSettings{GPUHourlyUSD: m.Settings.Cost.GPUHourlyUSD, GPUs: m.Settings.Cost.GPUs},
					TargetRate: target, Warmup: time.Duration(m.Settings.WarmupSeconds * float64(time.Second))})
				sum.MaxInFlight, sum.WarmupRequests = m.Summary.MaxInFlight, m.Summary.WarmupRequests
				if !reflect.DeepEqual(sum, m.Summary) {
					t.Errorf("%s: summary of the embedded records differs:\n got %+v\nwant %+v", m.Name, sum, m.Summary)
				}
			}
		})
	}
}

// tree is how the reports of a run are merged: a leaf is worker Shard's
// report, a node the merge (with --embed-requests) of its kids.
type tree struct {
	Shard int
	Kids  []tree
}

func leaf(i int) tree        { return tree{Shard: i} }
func node(kids ...tree) tree { return tree{Kids: kids} }
func leaves(idx ...int) (ts []tree) {
	for _, i := range idx {
		ts = append(ts, leaf(i))
	}
	return ts
}

// TestMergeHierarchical is the round-trip property: however the workers'
// reports are grouped and merged with --embed-requests — per node, in
// several levels, a merged report merged again on its own, merged and
// unmerged reports together — the final merge is the same report, records
// included, as merging all the workers' reports at once.
func TestMergeHierarchical(t *testing.T) {
	t.Parallel()
	workers := map[string]func(t *testing.T, dir string) []Input{
		"open":   func(t *testing.T, dir string) []Input { return openWorkers(t, dir, 400, 4) },
		"closed": func(t *testing.T, dir string) []Input { return closedWorkers(t, dir, []int{1, 2, 3, 4}) },
		"open2":  func(t *testing.T, dir string) []Input { return openWorkers(t, dir, 200, 2) },
	}
	for _, tc := range []struct {
		workers string
		name    string
		top     tree
	}{
		{"open2", "0/2 and 1/2 merged, merged again alone", node(node(leaves(0, 1)...))},
		{"open2", "each shard merged alone, then together", node(node(leaf(0)), node(leaf(1)))},
		{"open", "per-node pairs", node(node(leaves(0, 1)...), node(leaves(2, 3)...))},
		{"open", "interleaved pairs", node(node(leaves(1, 3)...), node(leaves(2, 0)...))},
		{"open", "three and a raw worker", node(leaf(3), node(leaves(0, 1, 2)...))},
		{"open", "three levels", node(node(node(leaves(0, 1)...), leaf(2)), leaf(3))},
		{"closed", "per-node pairs", node(node(leaves(0, 1)...), node(leaves(2, 3)...))},
		{"closed", "three and a raw worker: unequal users per input", node(node(leaves(0, 1, 2)...), leaf(3))},
		{"closed", "three levels", node(leaf(3), node(leaf(2), node(leaves(1, 0)...)))},
	} {
		t.Run(tc.workers+"/"+tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := workers[tc.workers](t, dir)
			direct, err := Merge(in, MergeOptions{EmbedRequests: true})
			if err != nil {
				t.Fatal(err)
			}
			merges := 0
			var eval func(tr tree) Input
			eval = func(tr tree) Input {
				if tr.Kids == nil {
					return in[tr.Shard]
				}
				var kids []Input
				for _, k := range tr.Kids {
					kids = append(kids, eval(k))
				}
				d, err := Merge(kids, MergeOptions{EmbedRequests: true})
				if err != nil {
					t.Fatal(err)
				}
				merges++
				return writeRead(t, dir, fmt.Sprintf("m%d.json", merges), d)
			}
			got := eval(tc.top).Doc
			if !reflect.DeepEqual(got.Runs, direct.Runs) {
				for i := range min(len(got.Runs), len(direct.Runs)) {
					g, w := got.Runs[i], direct.Runs[i]
					if !reflect.DeepEqual(g, w) {
						t.Errorf("run %d: %q, %d records, summary %+v\nwant %q, %d records, summary %+v", i, g.Name, len(g.Requests), g.Summary,
							w.Name, len(w.Requests), w.Summary)
					}
				}
				t.Fatalf("%d runs, want %d", len(got.Runs), len(direct.Runs))
			}
			gm, dm := got.Metadata, direct.Metadata
			if !reflect.DeepEqual(gm.Shards, dm.Shards) || !gm.Started.Equal(dm.Started) || !gm.Finished.Equal(dm.Finished) || gm.Command != "merge" {
				t.Errorf("metadata %+v\nwant %+v", gm, dm)
			}
			// The workers' warnings come through, named by the path they
			// took; the partial merges' own warnings do not.
			if len(gm.Warnings) != len(dm.Warnings) {
				t.Fatalf("warnings %q, want %q", gm.Warnings, dm.Warnings)
			}
			for i, w := range dm.Warnings {
				if !strings.HasSuffix(gm.Warnings[i], w) {
					t.Errorf("warning %q, want one ending in %q", gm.Warnings[i], w)
				}
			}
			if len(dm.Warnings) != 1 || dm.Warnings[0] != "w1.json: exporter unreachable" {
				t.Errorf("direct merge's warnings %q", dm.Warnings)
			}
		})
	}
}

// TestMergePartial checks what a merge of some of the shards says about
// itself, and what a later merge of merged reports requires.
func TestMergePartial(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in := openWorkers(t, dir, 400, 4)
	half, err := Merge(in[:2], MergeOptions{EmbedRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	r := half.Runs[0]
	if strings.Join(half.Metadata.Shards, ",") != "0/4,1/4" || r.Settings.Shard != "" || r.Summary.TargetRatePerSecond != 20 ||
		len(r.Requests) != 200 {
		t.Errorf("half: shards %q, settings.shard %q, target %v, %d records", half.Metadata.Shards, r.Settings.Shard,
			r.Summary.TargetRatePerSecond, len(r.Requests))
	}
	if w := half.Metadata.Warnings; len(w) != 2 || w[1] != "merge: merged 2 of 4 shards: shards [2 3] missing" {
		t.Errorf("half: warnings %q", w)
	}
	h := writeRead(t, dir, "half.json", half)
	plain, err := Merge(in[:2], MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := writeRead(t, dir, "plain.json", plain)
	other := openWorkers(t, t.TempDir(), 400, 2)
	for _, tc := range []struct {
		name string
		in   []Input
		want string
	}{
		{"overlap with a worker", []Input{h, in[1]}, "w1.json: shard 1/4 also in half.json"},
		{"overlap with a merge", []Input{in[2], h, h}, "half.json: shard 0/4 also in half.json"},
		{"merged without records", []Input{p, in[2]}, "plain.json: run \"rate=40\" has no per-request records: a report merged without EmbedRequests cannot be merged again (merge the workers' reports, or merge them with EmbedRequests)"},
		{"different shard counts", []Input{h, other[1]}, "w1.json: shard 1/2, but half.json has 4 shards"},
	} {
		if _, err := Merge(tc.in, MergeOptions{EmbedRequests: true}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// The rest of the shards complete it: no missing-shard warning left.
	all, err := Merge([]Input{h, in[2], in[3]}, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := all.Metadata.Warnings; len(w) != 1 || w[0] != "half.json: w1.json: exporter unreachable" || all.Runs[0].Summary.TargetRatePerSecond != 40 {
		t.Errorf("completed: warnings %q, target %v", w, all.Runs[0].Summary.TargetRatePerSecond)
	}
}
