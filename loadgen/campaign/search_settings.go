package campaign

import (
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// SearchSettings are a search's settings as a person gives them: where it
// starts (Concurrency users in closed loop or Rate requests per second in
// open loop, one of them), its bounds and its objectives as text
// (ParseObjective's). Config turns them into a checked SearchConfig.
type SearchSettings struct {
	Concurrency        int
	Rate               float64
	Max, Growth        float64
	Precision          float64
	MaxProbes, Repeats int
	Objectives         []string
}

// Config is the search of s over campaigns of load's settings, checked
// (SearchConfig.Validate); every error names the setting at fault
// (package option).
func (s SearchSettings) Config(load Settings) (SearchConfig, error) {
	cfg := SearchConfig{Max: s.Max, Growth: s.Growth, Precision: s.Precision, MaxProbes: s.MaxProbes, Repeats: s.Repeats}
	switch {
	case s.Concurrency != 0 && s.Rate != 0:
		return cfg, option.Errorf("set either %s or %s, not both", option.Name("Concurrency"), option.Name("Rate"))
	case s.Rate != 0:
		cfg.Mode, cfg.Start = report.ModeOpen, s.Rate
	case s.Concurrency != 0:
		cfg.Mode, cfg.Start = report.ModeClosed, float64(s.Concurrency)
	default:
		return cfg, option.Errorf("set %s N (closed loop, search over users from N) or %s R (open loop, search over requests per second from R)",
			option.Name("Concurrency"), option.Name("Rate"))
	}
	if load.Trace != "" {
		return cfg, option.Errorf("%s: a trace replays its own times; a search sets the rate itself", option.Name("Trace"))
	}
	for _, text := range s.Objectives {
		o, err := ParseObjective(option.Name("Objectives"), text)
		if err != nil {
			return cfg, err
		}
		cfg.Objectives = append(cfg.Objectives, o)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}
