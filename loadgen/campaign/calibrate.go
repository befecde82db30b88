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

// probeTimeout bounds one tokenize call (within the calibration's own
// bound, calibrationTimeout).
const probeTimeout = 10 * time.Second

// Fitted tokens per word outside these bounds mean the server's counts do
// not follow the prompt (a server that always reports the same usage).
const minTokensPerWord, maxTokensPerWord = 0.2, 10.0

func validateCalibrate(o *Options) error {
	if o.CalibrateTimeout < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("CalibrateTimeout"), o.CalibrateTimeout)
	}
	switch m := o.Calibrate; m {
	case "", CalibrateAuto, CalibrateTokenize, CalibrateUsage, CalibrateOff:
		return nil
	default:
		return option.Errorf("%s %q: want %s, %s, %s or %s", option.Name("Calibrate"), m, CalibrateAuto, CalibrateTokenize, CalibrateUsage, CalibrateOff)
	}
}

// calibrationTimeout bounds the whole calibration: Options.CalibrateTimeout,
// else the first run's own bound (its warmup, duration and grace period
// with a duration; the request timeout without one), so that a server that
// does not answer ends the campaign as soon as a run against it would.
func (c *Campaign) calibrationTimeout() time.Duration {
	if t := c.opt.CalibrateTimeout; t > 0 {
		return t
	}
	if r := c.opt.Run; r.Duration > 0 {
		return r.Warmup + r.Duration + r.GracePeriod
	}
	return c.opt.Client.Timeout
}

// calibrates reports whether the campaign fits its prompts to the server:
// synthetic prompts, multi-turn histories and traces, or a dataset's
// replies (its prompts are sent as written), unless off.
func (c *Campaign) calibrates() bool {
	if c.opt.Calibrate == CalibrateOff {
		return false
	}
	return c.opt.Workload.Dataset == nil || c.work.HasReplies()
}

// calibrate fits the prompts' words to the server's token counts and sets
// the workload's conversion (workload.Tokens). It ends within
// calibrationTimeout: a server that has not answered by then fails it with
// TimedOut set (and the campaign starts no run). A failed calibration is
// recorded, logged, and leaves one word per token; only a cancelled
// context is an error.
func (c *Campaign) calibrate(parent context.Context) (*report.TokenCalibration, error) {
	cal := &report.TokenCalibration{}
	method := c.opt.Calibrate
	if method == "" {
		method = CalibrateAuto
	}
	timeout := c.calibrationTimeout()
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	var (
		count  func(ctx context.Context, r client.Request) (int, error)
		err    error
		tokErr error // auto: why the tokenize endpoint was given up
	)
	if method == CalibrateAuto || method == CalibrateTokenize {
		cal.Method = CalibrateTokenize
		count = c.tokenize
		// One probe tells whether the server has the endpoint; in auto,
		// within half the calibration's time, so that the usage requests
		// keep the other half.
		first := ctx
		if method == CalibrateAuto {
			var stop context.CancelFunc
			first, stop = context.WithTimeout(ctx, min(probeTimeout, timeout/2))
			defer stop()
		}
		if _, err = count(first, c.probe(0)); err != nil && method == CalibrateAuto && ctx.Err() == nil {
			c.log.Info("no tokenize endpoint: calibrating prompt lengths from the usage of short requests", "err", err)
			tokErr, err = err, nil
			cal.Method, count = CalibrateUsage, c.usageCount
		}
	} else {
		cal.Method, count = CalibrateUsage, c.usageCount
	}
	var replies *workload.Replies
	switch {
	case err == nil && c.opt.Workload.Dataset != nil:
		cal.Calibrated = report.CalibratedDatasetReplies
		replies, err = c.countReplies(ctx, count, cal)
	case err == nil:
		for i, words := range probeWords {
			var n int
			if n, err = count(ctx, c.probe(i)); err != nil {
				err = fmt.Errorf("calibration request %d of %d: %w", i+1, len(probeWords), err)
				break
			}
			cal.Probes = append(cal.Probes, report.TokenProbe{Words: words, Tokens: n})
		}
	}
	if parent.Err() != nil {
		return nil, parent.Err()
	}
	if err != nil && ctx.Err() != nil {
		// The calibration's time is up: the server did not answer.
		cal.TimedOut = true
		if tokErr != nil {
			err = fmt.Errorf("%w; before that %w", err, tokErr)
		}
		err = fmt.Errorf("the server did not answer within the calibration's time limit of %s: %w", timeout, err)
	}
	if err == nil && replies == nil {
		cal.TokensPerWord, cal.OverheadTokens, err = fitLine(cal.Probes)
	}
	if err != nil {
		cal.Error = err.Error()
		cal.TokensPerWord, cal.OverheadTokens = 0, 0
		if cal.TimedOut {
			c.log.Error("token calibration failed: the server did not answer, no run started", "method", cal.Method, "err", err)
		} else {
			c.log.Warn("token calibration failed: one word per token asked for", "method", cal.Method, "err", err)
		}
		return cal, nil
	}
	if replies != nil {
		c.work = c.work.WithReplies(*replies)
		c.log.Info("dataset replies counted in the server's tokens: output lengths", "method", cal.Method, "replies_counted", len(cal.Probes),
			"tokens_per_word", cal.TokensPerWord)
		return cal, nil
	}
	c.resizeSystemPrompt(cal)
	c.work = c.work.WithTokens(workload.Tokens{TokensPerWord: cal.TokensPerWord, Overhead: cal.OverheadTokens})
	c.log.Info("prompt lengths calibrated to the server's tokens", "method", cal.Method, "tokens_per_word", cal.TokensPerWord, "overhead_tokens", cal.OverheadTokens)
	return cal, nil
}

// probe is calibration request i: probeWords[i] words, with the system
// prompt every request has.
func (c *Campaign) probe(i int) client.Request {
	r := c.work.ProbeRequest(i, probeWords[i])
	r.System = c.system
	return r
}

// replySample is how many of a dataset's replies a calibration counts;
// the others' lengths are their words × the tokens per word of those.
const replySample = 16

// countReplies counts, in the server's tokens, the replies of the first
// replySample dataset rows sent whose reply sets their output length
// (Entry.Reply): each sent as a prompt (count), less what the server adds
// to any prompt (a one-word prompt's count less one). The counts are used
// as they are for those rows, and their total over the replies' words is
// the tokens per word of the others (Probes: each reply's words and
// tokens).
func (c *Campaign) countReplies(ctx context.Context, count func(context.Context, client.Request) (int, error), cal *report.TokenCalibration) (*workload.Replies, error) {
	sample := c.work.ReplySample(replySample)
	base, err := count(ctx, client.Request{Prompt: "x", InputTokens: 1, MaxTokens: 1, System: c.system})
	if err != nil {
		return nil, fmt.Errorf("calibration request 1 of %d (a one-word prompt): %w", len(sample)+1, err)
	}
	base--
	r := &workload.Replies{Counted: map[int]int{}}
	words, tokens := 0, 0
	for j, k := range sample {
		reply := c.opt.Workload.Dataset.Entries[k].Reply
		n, err := count(ctx, client.Request{Index: j + 1, Prompt: reply, InputTokens: len(strings.Fields(reply)), MaxTokens: 1, System: c.system})
		if err != nil {
			return nil, fmt.Errorf("calibration request %d of %d (the reply of dataset entry %d): %w", j+2, len(sample)+1, k+1, err)
		}
		n = max(n-base, 1)
		w := len(strings.Fields(reply))
		r.Counted[k] = n
		words, tokens = words+w, tokens+n
		cal.Probes = append(cal.Probes, report.TokenProbe{Words: w, Tokens: n})
	}
	if words == 0 {
		return nil, errors.New("the dataset's replies have no words")
	}
	r.TokensPerWord = float64(tokens) / float64(words)
	cal.TokensPerWord = r.TokensPerWord
	return r, nil
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
	case !rec.OK() && ctx.Err() != nil:
		return 0, fmt.Errorf("POST %s (max_tokens 1): no answer (%s)", redactURL(c.client.URL()), rec.Error)
	case !rec.OK():
		return 0, fmt.Errorf("POST %s: %s: %s", redactURL(c.client.URL()), rec.ErrorClass, rec.Error)
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
		if r.System != "" {
			body["prompt"] = r.System + "\n\n" + r.Prompt
		}
	} else {
		var msgs []map[string]string
		if r.System != "" {
			msgs = append(msgs, map[string]string{"role": "system", "content": r.System})
		}
		body["messages"] = append(msgs, map[string]string{"role": "user", "content": r.Prompt})
		// The chat template's own arguments (enable_thinking, …) change
		// what it adds: the requests' are counted with it.
		var extra struct {
			Kwargs json.RawMessage `json:"chat_template_kwargs"`
		}
		if json.Unmarshal([]byte(c.client.ExtraBody()), &extra) == nil && len(extra.Kwargs) > 0 {
			body["chat_template_kwargs"] = extra.Kwargs
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	url := strings.TrimSuffix(strings.TrimRight(c.opt.Client.BaseURL, "/"), "/v1") + "/tokenize"
	where := "POST " + redactURL(url)
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
	c.client.SetHeaders(req.Header)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: c.opt.Client.TLS, Proxy: http.ProxyFromEnvironment}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%s: no answer (%w)", where, ctx.Err())
		}
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d", where, resp.StatusCode)
	}
	var out struct {
		Count *int `json:"count"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&out); err != nil || out.Count == nil {
		return 0, fmt.Errorf("%s: no \"count\" in the answer (%v)", where, err)
	}
	return *out.Count, nil
}
