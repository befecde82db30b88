package campaign

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// Calibration methods (Options.Calibrate): how the synthetic prompts'
// words are fitted to the server's token counts before the first run.
const (
	// CalibrateAuto: the server's tokenize endpoint where it has vLLM's
	// POST /tokenize, else the usage of short requests.
	CalibrateAuto = "auto"
	// CalibrateTokenize: only the tokenize endpoint (an error without it).
	CalibrateTokenize = "tokenize"
	// CalibrateUsage: the prompt_tokens the server reports for requests
	// with max_tokens 1.
	CalibrateUsage = "usage"
	// CalibrateOff: one word per token asked for (no calibration).
	CalibrateOff = "off"
)

// probeWords are the lengths, in words, of the calibration prompts: two
// prompts of each, so that a line fits through them.
var probeWords = []int{32, 32, 128, 128, 512, 512}

// probeTimeout bounds one tokenize call.
const probeTimeout = 10 * time.Second

// Fitted tokens per word outside these bounds mean the server's counts do
// not follow the prompt (a server that always reports the same usage).
const minTokensPerWord, maxTokensPerWord = 0.2, 10.0

func validateCalibrate(m string) error {
	switch m {
	case "", CalibrateAuto, CalibrateTokenize, CalibrateUsage, CalibrateOff:
		return nil
	}
	return option.Errorf("%s %q: want %s, %s, %s or %s", option.Name("Calibrate"), m, CalibrateAuto, CalibrateTokenize, CalibrateUsage, CalibrateOff)
}

// calibrates reports whether the campaign fits its prompts to the server:
// synthetic prompts, multi-turn histories and traces (not a dataset's
// prompts, sent as written), unless off.
func (c *Campaign) calibrates() bool {
	m := c.opt.Calibrate
	return m != CalibrateOff && c.opt.Workload.Dataset == nil
}

// calibrate fits the prompts' words to the server's token counts and sets
// the workload's conversion (workload.Tokens). A failed calibration is
// recorded, logged, and leaves one word per token; only a cancelled
// context is an error.
func (c *Campaign) calibrate(ctx context.Context) (*report.TokenCalibration, error) {
	cal := &report.TokenCalibration{}
	method := c.opt.Calibrate
	if method == "" {
		method = CalibrateAuto
	}
	var (
		count func(ctx context.Context, r client.Request) (int, error)
		err   error
	)
	if method == CalibrateAuto || method == CalibrateTokenize {
		cal.Method = CalibrateTokenize
		count = c.tokenize
		// One probe tells whether the server has the endpoint.
		if _, err = count(ctx, c.work.ProbeRequest(0, probeWords[0])); err != nil && method == CalibrateAuto && ctx.Err() == nil {
			c.log.Info("no tokenize endpoint: calibrating prompt lengths from the usage of short requests", "err", err)
			err = nil
			cal.Method, count = CalibrateUsage, c.usageCount
		}
	} else {
		cal.Method, count = CalibrateUsage, c.usageCount
	}
	if err == nil {
		for i, words := range probeWords {
			var n int
			if n, err = count(ctx, c.work.ProbeRequest(i, words)); err != nil {
				break
			}
			cal.Probes = append(cal.Probes, report.TokenProbe{Words: words, Tokens: n})
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err == nil {
		cal.TokensPerWord, cal.OverheadTokens, err = fitLine(cal.Probes)
	}
	if err != nil {
		cal.Error = err.Error()
		cal.TokensPerWord, cal.OverheadTokens = 0, 0
		c.log.Warn("token calibration failed: one word per token asked for", "method", cal.Method, "err", err)
		return cal, nil
	}
	c.work = c.work.WithTokens(workload.Tokens{TokensPerWord: cal.TokensPerWord, Overhead: cal.OverheadTokens})
	c.log.Info("prompt lengths calibrated to the server's tokens", "method", cal.Method, "tokens_per_word", cal.TokensPerWord, "overhead_tokens", cal.OverheadTokens)
	return cal, nil
}

// fitLine fits tokens = a × words + b by least squares.
func fitLine(ps []report.TokenProbe) (a, b float64, err error) {
	var n, sx, sy, sxx, sxy float64
	for _, p := range ps {
		x, y := float64(p.Words), float64(p.Tokens)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	d := n*sxx - sx*sx
	if n < 2 || d == 0 {
		return 0, 0, errors.New("too few calibration prompts")
	}
	a = (n*sxy - sx*sy) / d
	b = (sy - a*sx) / n
	if !(a >= minTokensPerWord && a <= maxTokensPerWord) {
		return 0, 0, fmt.Errorf("the server's prompt token counts do not follow the prompt's length (%.3g tokens per word fitted from %v)", a, ps)
	}
	return a, b, nil
}

// usageCount sends r with max_tokens 1 and returns the prompt_tokens the
// server reported.
func (c *Campaign) usageCount(ctx context.Context, r client.Request) (int, error) {
	now := time.Now()
	rec := c.client.Do(ctx, r, now, now)
	switch {
	case !rec.OK():
		return 0, fmt.Errorf("calibration request: %s: %s", rec.ErrorClass, rec.Error)
	case rec.TokensEstimated:
		return 0, errors.New("the server reports no usage")
	}
	return rec.PromptTokens, nil
}

// tokenize asks the server's POST /tokenize (vLLM's, at the API's root)
// how many tokens r's prompt is, the chat template included for the chat
// endpoint.
func (c *Campaign) tokenize(ctx context.Context, r client.Request) (int, error) {
	body := map[string]any{"model": c.opt.Client.Model}
	if c.opt.Client.Endpoint == client.EndpointCompletions {
		body["prompt"] = r.Prompt
	} else {
		body["messages"] = []map[string]string{{"role": "user", "content": r.Prompt}}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	url := strings.TrimSuffix(strings.TrimRight(c.opt.Client.BaseURL, "/"), "/v1") + "/tokenize"
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.opt.Client.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opt.Client.APIKey)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.opt.Client.TLS, Proxy: http.ProxyFromEnvironment}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST /tokenize: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST /tokenize: HTTP %d", resp.StatusCode)
	}
	var out struct {
		Count *int `json:"count"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil || out.Count == nil {
		return 0, fmt.Errorf("POST /tokenize: no \"count\" in the answer (%v)", err)
	}
	return *out.Count, nil
}
