package campaign

import (
	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// validatePrompts checks what the shared-prefix and image workloads need
// of the rest of the options: images go in chat messages only.
func validatePrompts(o *Options) error {
	if o.Workload.Images != nil && o.Client.Endpoint != client.EndpointChat {
		return option.Errorf("%s: images need the chat endpoint (%s %q)", option.Name("ImagesPerRequest"), option.Name("Endpoint"), o.Client.Endpoint)
	}
	return nil
}

// promptSettings are the shared-prefix and image parts of a run's
// settings (zero when unused).
func (c *Campaign) promptSettings() (report.SharedPrefixSettings, report.ImageSettings) {
	var sp report.SharedPrefixSettings
	if s := c.opt.Workload.SharedPrefix; s != nil {
		sp = report.SharedPrefixSettings{Groups: s.Groups, Tokens: s.Tokens.String(), Pick: s.Pick.String()}
	}
	var im report.ImageSettings
	if i := c.opt.Workload.Images; i != nil {
		im = i.Settings
	}
	return sp, im
}
