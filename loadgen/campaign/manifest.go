package campaign

import (
	"context"
	"net/http"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// validateServerInfo checks the option of asking the server what it is.
func validateServerInfo(o *Options) error {
	if o.ServerInfoTimeout < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("ServerInfoTimeout"), o.ServerInfoTimeout)
	}
	return nil
}

// newManifest is the manifest known before the campaign runs: the host
// and the labels.
func (c *Campaign) newManifest() *report.Manifest {
	return &report.Manifest{Host: report.Host(), Labels: c.opt.Labels}
}

// finishManifest completes meta's manifest once the campaign has run: the
// settings hash (from the first run's settings; none when no run ran) and,
// unless the campaign was interrupted or the server answered nothing
// (silent), what the server says it is.
func (c *Campaign) finishManifest(ctx context.Context, meta *report.Metadata, runs []report.Run, silent bool) {
	m := *meta.Manifest
	meta.Manifest = &m
	if len(runs) > 0 {
		cfg := report.Configuration{Settings: runs[0].Settings, Levels: c.plan.Levels, Repeats: c.plan.Repeats,
			DatasetSHA256: meta.DatasetSHA256, Shards: c.opt.Run.Shard.Count, ContinuousUsage: c.opt.Client.ContinuousUsage}
		if s := c.plan.Saturation; s != nil {
			cfg.Saturation = &report.Saturation{MaxErrorRatio: s.MaxErrorRatio, MinGoodputRatio: s.MinGoodputRatio}
		}
		h, err := report.SettingsHash(cfg)
		if err != nil {
			c.log.Warn("no settings hash", "err", err)
		}
		m.SettingsHash = h
	}
	if !c.opt.ServerInfo || silent || meta.Interrupted || ctx.Err() != nil {
		return
	}
	o := &c.opt.Client
	hdr := http.Header{}
	c.client.SetHeaders(hdr)
	m.Server = report.AskServer(ctx, report.ServerConfig{BaseURL: o.BaseURL, Model: o.Model, APIKey: o.APIKey, Header: hdr, TLS: o.TLS,
		Timeout: c.opt.ServerInfoTimeout, Transport: o.Transport})
	m.ServerVersion, m.ModelRevision = report.Derive(m.Server)
	c.log.Info("server asked what it is", "server_version", m.ServerVersion, "model_revision", m.ModelRevision)
}
