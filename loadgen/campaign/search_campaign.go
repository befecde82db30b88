package campaign

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// SearchCampaign is the Prober of gpulens-loadgen search: every probe is a
// campaign (loadgen/campaign) of one level and its repeats, a full run as
// `gpulens-loadgen run` makes it (token calibration included). It
// renames each probe's runs, records and responses by level and repeat
// across the whole search (a level probed twice continues its repeat
// numbers) and collects what the probes' metadata said.
//
// With distinct prompts (report.PromptsDistinct) probe k (from 1) sends
// the prompts of nonce NONCE-pK, NONCE being the search's nonce
// (Metadata.PromptNonce, drawn unless given), so that no probe's
// prompts are in the prefix cache from another's.
type SearchCampaign struct {
	mode     string
	opt      Options
	obs      Observer
	nonce    string
	meta     report.Metadata // the search's, from the first campaign
	first    bool
	probes   int
	perLevel map[float64]int
	// Records and Responses are every probe's (Options.KeepRecords,
	// Options.SaveResponses), renamed.
	Records, Responses []report.Record
	// Completed and Failed count the measured requests of every probe.
	Completed, Failed int
	warnings          []string
	interrupted       bool
	calibration       *report.TokenCalibration
	gpu               *report.GPUInfo
	serverModel       string
	manifest          *report.Manifest
	started           time.Time
}

// NewSearchCampaign validates the options with a campaign of levels lo and hi
// (the search's start and maximum) and prepares the probes; obs, when not
// nil, watches every run. Nothing is sent.
func NewSearchCampaign(mode string, o Options, lo, hi float64, obs Observer) (*SearchCampaign, error) {
	if o.Run.Shard.Count > 1 {
		return nil, option.Errorf("%s: a search cannot be sharded (each probe's level depends on the last one's result)", option.Name("Shard"))
	}
	nonce := o.Workload.Nonce
	if o.Prompts == report.PromptsDistinct {
		if nonce == "" {
			nonce = report.RandomID()
		}
		if err := workload.ValidateNonce(nonce + "-p1000"); err != nil {
			return nil, option.Errorf("%s: %w (a search appends -pK to it for probe K)", option.Name("PromptNonce"), err)
		}
		o.Workload.Nonce = nonce + "-p0"
	}
	c, err := New(Plan{Command: "search", Mode: mode, Levels: []float64{lo, hi}, Repeats: 1}, o)
	if err != nil {
		return nil, err
	}
	meta := c.Metadata()
	meta.PromptNonce = nonce
	return &SearchCampaign{mode: mode, opt: o, obs: obs, nonce: nonce, meta: meta, first: true, perLevel: map[float64]int{}}, nil
}

// Metadata is the search's metadata before it runs (run ID, target,
// model…).
func (c *SearchCampaign) Metadata() report.Metadata { return c.meta }

// Probe runs one campaign of level × repeats.
func (c *SearchCampaign) Probe(ctx context.Context, level float64, repeats int) ([]report.Run, error) {
	if c.started.IsZero() {
		c.started = time.Now().UTC()
	}
	c.probes++
	o := c.opt
	if o.Prompts == report.PromptsDistinct {
		o.Workload.Nonce = fmt.Sprintf("%s-p%d", c.nonce, c.probes)
	}
	o.ServerInfo = o.ServerInfo && c.first // ask the server once
	camp, err := New(Plan{Command: "search", Mode: c.mode, Levels: []float64{level}, Repeats: repeats}, o)
	if err != nil {
		return nil, err
	}
	res, err := camp.Run(ctx, c.obs)
	// The next probe makes its own client: close this one's connections
	// now rather than when the garbage collector finds them.
	camp.CloseIdleConnections()
	if err != nil {
		return nil, err
	}
	m := res.Document.Metadata
	if c.first {
		c.first = false
		c.calibration, c.manifest = m.TokenCalibration, m.Manifest
	}
	if c.serverModel == "" {
		c.serverModel = m.ServerModel
	}
	if m.GPU != nil {
		c.gpu = m.GPU
	}
	for _, w := range m.Warnings {
		c.warnings = append(c.warnings, fmt.Sprintf("probe %d (%s): %s", c.probes, report.RunName(c.mode, level, 0), w))
	}
	c.interrupted = c.interrupted || m.Interrupted
	c.Completed += res.Completed
	c.Failed += res.Failed

	names := map[string]report.Run{} // a probe's run name → the renamed run
	var out []report.Run
	for _, r := range res.Document.Runs {
		if r.Aggregate {
			continue
		}
		c.perLevel[level]++
		old := r.Name
		r.Repeat = c.perLevel[level]
		r.Name = report.RunName(c.mode, level, r.Repeat)
		names[old] = r
		out = append(out, r)
	}
	rename := func(recs []report.Record) []report.Record {
		for i := range recs {
			if r, ok := names[recs[i].Run]; ok {
				recs[i].Run, recs[i].Repeat = r.Name, r.Repeat
			}
		}
		return recs
	}
	c.Records = append(c.Records, rename(res.Records)...)
	c.Responses = append(c.Responses, rename(res.Responses)...)
	return out, nil
}

// Document is the search's report: its metadata (the first probe's
// calibration and manifest, every probe's warnings, the search) and r's
// runs.
func (c *SearchCampaign) Document(r *SearchResult) *report.Document {
	m := c.meta
	m.Started, m.Finished = c.started, time.Now().UTC()
	if m.Started.IsZero() {
		m.Started = m.Finished
	}
	m.Warnings = append(m.Warnings, c.warnings...)
	m.Interrupted = m.Interrupted || c.interrupted || r.Search.Outcome == report.SearchInterrupted
	m.TokenCalibration, m.GPU, m.ServerModel = c.calibration, c.gpu, c.serverModel
	if c.manifest != nil {
		mf := *c.manifest
		m.Manifest = &mf
	}
	if m.Manifest != nil && len(r.Runs) > 0 {
		m.Manifest.SettingsHash = SettingsHash(report.Configuration{Settings: r.Runs[0].Settings, Repeats: r.Search.Repeats,
			DatasetSHA256: m.DatasetSHA256, ContinuousUsage: c.opt.Client.ContinuousUsage}, r.Search)
	}
	m.Search = r.Search
	return &report.Document{Metadata: m, Runs: r.Runs}
}

// SettingsHash is a search's settings hash: that of its runs' settings
// (report.SettingsHash, without levels) and of the search's own
// settings (objectives, start, maximum, growth, precision, probe budget,
// repeats), so that two searches hash alike exactly when they searched
// the same way for the same workload. Empty when it cannot be computed.
func SettingsHash(cfg report.Configuration, s *report.Search) string {
	base, err := report.SettingsHash(cfg)
	if err != nil {
		return ""
	}
	var objs []string
	for _, o := range s.Objectives {
		objs = append(objs, fmt.Sprintf("%s:%s%s%g", o.Metric, o.Stat, o.Op, o.Threshold))
	}
	b, err := report.Canonical(struct {
		Base       string   `json:"base"`
		Mode       string   `json:"mode"`
		Objectives []string `json:"objectives"`
		Start      float64  `json:"start"`
		Max        float64  `json:"max"`
		Growth     float64  `json:"growth"`
		Precision  float64  `json:"precision"`
		MaxProbes  int      `json:"max_probes"`
		Repeats    int      `json:"repeats"`
	}{base, s.Mode, objs, s.Start, s.Max, s.Growth, s.Precision, s.MaxProbes, s.Repeats})
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
