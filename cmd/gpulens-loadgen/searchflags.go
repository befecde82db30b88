package main

import (
	"fmt"
	"maps"
	"strings"

	"github.com/gpulens/gpulens/loadgen/option"
)

// sloFlag is --slo: per-request goodput thresholds (ttft=500ms,tpot=50ms,
// comma-separated; repeated flags add up) and, for search, level
// objectives (ttft:p99<=500ms, goodput>=0.95, errors<=0.01; one per flag),
// told apart by their <= or >=.
type sloFlag struct {
	perRequest *string
	objectives *[]string
}

func (s *sloFlag) Set(v string) error {
	if strings.Contains(v, "<=") || strings.Contains(v, ">=") {
		*s.objectives = append(*s.objectives, v)
		return nil
	}
	if *s.perRequest != "" && strings.TrimSpace(v) != "" {
		v = *s.perRequest + "," + v
	}
	*s.perRequest = v
	return nil
}

func (s *sloFlag) String() string {
	return strings.Join(append([]string{*s.perRequest}, *s.objectives...), " ")
}

// IsCumulative lets --slo repeat (kingpin).
func (s *sloFlag) IsCumulative() bool { return true }

// noObjectives rejects level objectives in run and sweep, which measure
// given levels and judge none.
func noObjectives(f *loadFlags) error {
	if len(f.objectives) > 0 {
		return fmt.Errorf("--slo %q: a level objective (METRIC:STAT<=DURATION, goodput>=RATIO, errors<=RATIO) is for `gpulens-loadgen search`; "+
			"run and sweep take per-request thresholds (--slo ttft=500ms,tpot=50ms)", f.objectives[0])
	}
	return nil
}

// searchFlagNames spell the options of the search (loadgen/campaign, search*.go) as search's flags.
var searchFlagNames = map[option.Name]string{
	"Start":      "--concurrency or --rate",
	"Max":        "--search.max",
	"Growth":     "--search.growth",
	"Precision":  "--search.precision",
	"MaxProbes":  "--search.max-probes",
	"Repeats":    "--repeats",
	"Objectives": "--slo",
	"Shard":      "--shard",
}

// searchNames is the map search's errors are renamed with: run's options
// (loadFlagNames) and, over them, search's own.
func searchNames() map[option.Name]string {
	names := maps.Clone(loadFlagNames)
	maps.Copy(names, searchFlagNames)
	return names
}
