package report

// Search is what `gpulens-loadgen search` found (Metadata.Search): the
// largest level (users in closed loop, requests per second in open loop)
// that meets every objective, bracketed by the smallest level that does
// not, with the evidence of every level probed. A level passes only when
// every run at it (its repeats, and its confirming runs) meets every
// objective (Rule). The document's runs are every probe's runs, named by
// level and repeat, and an aggregate per level with more than one run.
type Search struct {
	// Mode is ModeClosed or ModeOpen.
	Mode       string            `json:"mode"`
	Objectives []SearchObjective `json:"objectives"`
	// Rule states when a level passes, in words.
	Rule string `json:"rule"`
	// Start, Max, Growth, Precision, MaxProbes and Repeats are the
	// search's settings: the first level, the highest it may probe, the
	// factor of the exponential phase, the relative width at which the
	// bracket is narrow enough ((fail − pass) / pass ≤ Precision; in
	// closed loop also fail − pass = 1), the most levels probed before
	// the confirmation, and the runs per probe.
	Start     float64 `json:"start"`
	Max       float64 `json:"max"`
	Growth    float64 `json:"growth"`
	Precision float64 `json:"precision"`
	MaxProbes int     `json:"max_probes"`
	Repeats   int     `json:"repeats"`

	// Pass is the highest level that passed below Fail (0: none passed);
	// Fail the lowest level that failed (0: none failed up to Max). The
	// boundary lies between them.
	Pass float64 `json:"pass"`
	Fail float64 `json:"fail"`
	// Outcome is SearchBracketed, SearchAllPass, SearchNonePass or
	// SearchInterrupted; Stop says why the search stopped probing.
	Outcome string `json:"outcome"`
	Stop    string `json:"stop"`
	// Confirmed is true when the confirming runs at Pass all met the
	// objectives and those at Fail did not (at least one missed one):
	// the bracket held when measured again. Confirmation says what the
	// confirming runs found, in words.
	Confirmed    bool   `json:"confirmed"`
	Confirmation string `json:"confirmation,omitempty"`
	// NonMonotone lists contradictions: a level that passed above one
	// that failed, and a level whose runs disagreed (some passed, some
	// did not). They are reported, never smoothed over; the bracket is
	// always taken below the lowest failing level.
	NonMonotone []string `json:"non_monotone,omitempty"`
	// Levels is every probed level with its runs, ascending.
	Levels []SearchLevel `json:"levels"`
	// Probes is the order in which levels were probed.
	Probes []SearchProbe `json:"probes"`
}

// Search outcomes (Search.Outcome).
const (
	// SearchBracketed: a passing level and a failing one above it.
	SearchBracketed = "bracketed"
	// SearchAllPass: every level up to Max passed; capacity is at least Max.
	SearchAllPass = "all_pass"
	// SearchNonePass: even the lowest level probed failed.
	SearchNonePass = "none_pass"
	// SearchInterrupted: stopped (Ctrl-C) before a bracket was found.
	SearchInterrupted = "interrupted"
)

// SearchObjective is one objective a level must meet, e.g. "ttft:p99<=500ms".
type SearchObjective struct {
	// Text is the objective as given.
	Text string `json:"text"`
	// Metric is ttft, itl, tpot or e2e (latencies, in seconds), goodput
	// (the share of requests that were good: summary.goodput_ratio) or
	// errors (the share of requests that failed).
	Metric string `json:"metric"`
	// Stat is the latency statistic: p50, p90, p95, p99, mean or max
	// (empty for goodput and errors).
	Stat string `json:"stat,omitempty"`
	// Op is "<=" or ">=", Threshold the bound (seconds or a ratio 0–1).
	Op        string  `json:"op"`
	Threshold float64 `json:"threshold"`
}

// SearchLevel is one probed level and all its runs.
type SearchLevel struct {
	Level  float64 `json:"level"`
	Passed bool    `json:"passed"`
	// Runs are its runs in the order they ran (probe repeats, then
	// confirming runs).
	Runs []SearchRun `json:"runs"`
}

// SearchRun is one run at a level and its check of every objective.
type SearchRun struct {
	// Name is the run's name in the document's runs.
	Name   string `json:"name"`
	Repeat int    `json:"repeat"`
	// Probe is the index (from 1) of the probe that ran it in Probes.
	Probe   int  `json:"probe"`
	Confirm bool `json:"confirm,omitempty"`
	Passed  bool `json:"passed"`
	// Checks are the objectives in Search.Objectives' order.
	Checks []SearchCheck `json:"checks"`
}

// SearchCheck is one objective in one run.
type SearchCheck struct {
	// Value is what the run measured (seconds or a ratio); Measured is
	// false when it measured nothing for it (no completed request, no
	// second token): the objective is then missed.
	Value    float64 `json:"value"`
	Measured bool    `json:"measured"`
	Passed   bool    `json:"passed"`
}

// Search phases (SearchProbe.Phase).
const (
	PhaseGrow    = "grow"    // exponential growth towards a failing level
	PhaseShrink  = "shrink"  // exponential descent towards a passing level
	PhaseBisect  = "bisect"  // halving the bracket
	PhaseConfirm = "confirm" // measuring the bracket's ends again
)

// SearchProbe is one probe: a level, why it was probed and what its runs
// said (whether all of this probe's runs passed).
type SearchProbe struct {
	Level  float64 `json:"level"`
	Phase  string  `json:"phase"`
	Passed bool    `json:"passed"`
}
