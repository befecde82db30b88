package campaign

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// validateSystemPrompt checks the system prompt options and returns the
// text every request starts with ("" for none): the given text, or
// SystemPromptTokens words of the synthetic vocabulary (resized to the
// server's tokens by the calibration, resizeSystemPrompt).
func validateSystemPrompt(o *Options) (string, error) {
	switch {
	case o.SystemPromptTokens < 0:
		return "", option.Errorf("%s must not be negative, got %d", option.Name("SystemPromptTokens"), o.SystemPromptTokens)
	case o.SystemPromptTokens > 0 && o.SystemPrompt != "":
		return "", option.Errorf("set %s or %s, not both", option.Name("SystemPrompt"), option.Name("SystemPromptTokens"))
	case o.SystemPromptTokens > 0:
		return workload.SystemPrompt(o.Workload.Seed, o.SystemPromptTokens), nil
	}
	return o.SystemPrompt, nil
}

// resizeSystemPrompt, after a calibration that fitted cal with the
// generated system prompt of SystemPromptTokens words in every probe,
// makes it the server's SystemPromptTokens tokens (tokens ÷ tokens per
// word) and moves the fitted per-request overhead by the tokens that
// changes, so that the prompts' lengths still add up.
func (c *Campaign) resizeSystemPrompt(cal *report.TokenCalibration) {
	n := c.opt.SystemPromptTokens
	if n == 0 || cal.TokensPerWord <= 0 {
		return
	}
	words := max(1, int(math.Round(float64(n)/cal.TokensPerWord)))
	cal.OverheadTokens += cal.TokensPerWord * float64(words-n)
	c.system = workload.SystemPrompt(c.opt.Workload.Seed, words)
	cal.SystemPromptWords = words
}

// requestSettings are the run settings of what every request carried
// besides its prompt.
func (c *Campaign) requestSettings() report.RequestSettings {
	s := report.RequestSettings{ExtraBody: report.JSONText(c.client.ExtraBody()), SystemPromptTokens: c.opt.SystemPromptTokens}
	if f := c.client.MaxTokensField(); f != client.FieldMaxTokens {
		s.MaxTokensField = f // recorded where it is not the default of older reports
	}
	if h := c.client.RedactedHeaders(); len(h) > 0 {
		b, _ := json.Marshal(h)
		s.Headers = report.JSONText(b)
	}
	if c.system != "" {
		sum := sha256.Sum256([]byte(c.system))
		s.SystemPromptSHA256, s.SystemPromptChars = hex.EncodeToString(sum[:]), len(c.system)
	}
	return s
}

// systemDoer gives every request the campaign's system prompt.
type systemDoer struct {
	next   runner.Doer
	system string
}

func (d systemDoer) Do(ctx context.Context, r client.Request, start, intended time.Time) report.Record {
	r.System = d.system
	return d.next.Do(ctx, r, start, intended)
}
