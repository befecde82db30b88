// Package client sends one streaming completion request to an
// OpenAI-compatible server and records when every part of the answer
// arrived.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/gpulens/gpulens/internal/rxstamp"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Endpoints.
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
)

// Config configures a Client.
type Config struct {
	// BaseURL is the API base URL, ending in /v1.
	BaseURL  string
	Endpoint string // chat or completions
	Model    string
	APIKey   string // never logged
	// Timeout bounds one whole request, from send to last byte.
	Timeout time.Duration
	// ContinuousUsage asks for usage on every chunk (vLLM's
	// stream_options.continuous_usage_stats). Per-chunk usage is trusted
	// for per-chunk token counts only when it was asked for and actually
	// grows (see tokensPerChunk): some servers (Ollama's /v1/completions)
	// put a zeroed usage on every chunk.
	ContinuousUsage bool
	// MaxConns sizes the connection pool; at least the concurrency.
	MaxConns int
	// Now is the clock; time.Now when nil. An injected clock also turns
	// kernel receive timestamps off (they come from the system clock).
	Now func() time.Time
	// ReadTimestamps stamps stream events when the client's read returns
	// instead of with the kernel's receive time of their bytes. Kernel
	// stamps (Linux; http:// and https:// through the client's own
	// connections, not an injected Transport) keep the load generator's own
	// scheduling delays out of TTFT and inter-token latencies for every
	// chunk read before the next one arrives (one read later takes the
	// later chunk's time: internal/rxstamp); this switch is there to
	// compare the two.
	ReadTimestamps bool
	// TLS configures https targets (CA, verification); nil: system roots.
	TLS *tls.Config
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper

	// ExtraBody is a JSON object whose members every request body carries
	// besides the client's own fields (sampling parameters, seed,
	// chat_template_kwargs, vendor fields), in key order; it may not set
	// the client's own (request.go). Headers are sent with every request
	// (and to the tokenize endpoint and the server's identity questions);
	// a secret one's value (Header.Secret, IsSecretHeader) is never
	// reported. MaxTokensField names the output-length field:
	// MaxTokensAuto (empty), FieldMaxTokens or FieldMaxCompletionTokens.
	ExtraBody      json.RawMessage
	Headers        []Header
	MaxTokensField string
}

// Request is one prompt to send.
type Request struct {
	Index       int
	Prompt      string
	InputTokens int // estimated prompt length in tokens
	// TargetInputTokens is the prompt length asked for, in the server's
	// tokens (0: none asked, e.g. a dataset's prompt): the record's
	// RequestedInputTokens.
	TargetInputTokens int
	MaxTokens         int
	IgnoreEOS         bool
	// System, when not empty, is the system prompt: a system message
	// before the user's for chat, text before the prompt (and a blank
	// line) for completions. History are earlier turns of a conversation
	// (a dataset's), sent after it and before the prompt: as messages for
	// chat, their texts each followed by a blank line for completions.
	System  string
	History []Message
	// PrefixGroup and PrefixTokens say which shared prefix the prompt
	// starts with (from 1; 0: none) and its length asked for, in the
	// server's tokens: copied to the record.
	PrefixGroup  int
	PrefixTokens int
	// Images are sent after the prompt as image_url content parts (chat
	// only; image.go).
	Images []Image
}

// attempt is a request in flight: its record and its times as the clock
// read them, which Do turns into offsets from the run's start.
type attempt struct {
	report.Record
	sent, firstByte, firstToken, firstAnswer, end time.Time
	// text, when not nil, collects the answer's text (DoText).
	text *textBuilder
}

// Text is what an answer said (DoText): the generated text (content, or
// text for completions), the reasoning text streamed apart from it
// (reasoning_content, reasoning) and the last finish reason sent. A
// request that failed keeps what arrived before it failed.
type Text struct {
	Content, Reasoning, FinishReason string
}

type textBuilder struct {
	content, reasoning strings.Builder
	finish             string
}

// add appends what one decoded chunk carried.
func (t *textBuilder) add(c *chunk) {
	for i := range c.Choices {
		ch := &c.Choices[i]
		for _, s := range [...]*string{ch.Delta.Content, ch.Text} {
			if s != nil {
				t.content.WriteString(*s)
			}
		}
		x, y := reasoningText(ch.Delta.ReasoningContent, ch.Delta.Reasoning)
		t.reasoning.WriteString(x)
		t.reasoning.WriteString(y)
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			t.finish = *ch.FinishReason
		}
	}
}

// Client sends requests. It is safe for concurrent use.
type Client struct {
	cfg  Config
	url  string
	http *http.Client
	now  func() time.Time
	pool sync.Pool
	// h1 sends plain-HTTP requests without net/http (nil: https, a proxy
	// or a test transport); path and hdr are its request line's target and
	// its fixed header lines.
	h1     *h1Pool
	rxHTTP bool // the client dials rxstamp connections (net/http and h1)
	path   string
	hdr    []byte
	bodies sync.Pool // *[]byte request bodies for h1
	// req is what Config adds to every request (request.go).
	req requestParts
}

// rxBody is a net/http response body read from an rxstamp connection
// (through TLS, when https): an ArrivalSource.
type rxBody struct {
	io.ReadCloser
	rx *rxstamp.Conn
}

func (b *rxBody) LastArrival() time.Time { return b.rx.LastArrival() }
func (b *rxBody) Kernel() bool           { return b.rx.Kernel() }

// rxConnOf finds the rxstamp connection under c (a TLS connection's
// NetConn, for https), or nil.
func rxConnOf(c net.Conn) *rxstamp.Conn {
	for c != nil {
		switch v := c.(type) {
		case *rxstamp.Conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// kernelStamped is a response body that can tell whether its newest read
// carried the kernel's receive timestamp.
type kernelStamped interface{ Kernel() bool }

type streamState struct {
	kernel kernelStamped // nil: read-return times
	rd     *Reader
	chunk  chunk
	counts chunkCounts
}

// chunkCounts is what the token-carrying chunks of a stream said, one
// element per chunk: their offsets from the send, their text bytes
// (answer and reasoning), the reasoning part of those, and the cumulative
// completion and reasoning tokens of their usage (-1: none). Its slices
// are reused from stream to stream (streamState's pool): the record gets
// an exact copy of the offsets, one allocation instead of one per
// doubling.
type chunkCounts struct {
	offsets               []time.Duration
	bytes, reasoningBytes []int
	cum, cumReasoning     []int
}

func (c *chunkCounts) reset() {
	c.offsets = c.offsets[:0]
	c.bytes, c.reasoningBytes, c.cum, c.cumReasoning = c.bytes[:0], c.reasoningBytes[:0], c.cum[:0], c.cumReasoning[:0]
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	base := strings.TrimRight(cfg.BaseURL, "/")
	if _, err := option.Check(base); err != nil {
		return nil, option.Errorf("%s %q: must be an http:// or https:// URL ending in /v1: %v", option.Name("BaseURL"), cfg.BaseURL, err)
	}
	var path string
	switch cfg.Endpoint {
	case EndpointChat:
		path = "/chat/completions"
	case EndpointCompletions:
		path = "/completions"
	default:
		return nil, option.Errorf("%s %q: must be chat or completions", option.Name("Endpoint"), cfg.Endpoint)
	}
	if cfg.Timeout <= 0 {
		return nil, option.Errorf("%s must be positive, got %s", option.Name("Timeout"), cfg.Timeout)
	}
	parts, err := prepareRequest(&cfg)
	if err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	tr := cfg.Transport
	conns := max(cfg.MaxConns, 1)
	// Kernel receive timestamps need the real clock and our own dialer.
	kernelStamps := !cfg.ReadTimestamps && cfg.Now == nil
	rxHTTP := tr == nil && kernelStamps
	if tr == nil {
		dial := (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		if rxHTTP {
			plain := dial
			dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
				nc, err := plain(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return rxstamp.Wrap(nc), nil
			}
		}
		tr = &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           dial,
			TLSClientConfig:       cfg.TLS,
			MaxIdleConns:          conns + 16,
			MaxIdleConnsPerHost:   conns + 16,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     false, // one stream per connection, as inference servers expect
			DisableCompression:    true,
			WriteBufferSize:       16 << 10,
			ReadBufferSize:        16 << 10,
			ExpectContinueTimeout: 0,
		}
	}
	c := &Client{cfg: cfg, url: base + path, http: &http.Client{Transport: tr}, now: now, rxHTTP: rxHTTP, req: parts}
	if cfg.Transport == nil {
		if err := c.directHTTP(conns); err != nil {
			return nil, err
		}
	}
	c.pool.New = func() any { return &streamState{rd: NewReader(nil, 0, now)} }
	c.bodies.New = func() any { b := make([]byte, 0, 1024); return &b }
	return c, nil
}

// directHTTP sets up the HTTP/1.1 client of h1.go for an http:// URL that
// no proxy applies to.
func (c *Client) directHTTP(conns int) error {
	u, err := url.Parse(c.url)
	if err != nil {
		return option.Errorf("%s %q: %w", option.Name("BaseURL"), c.cfg.BaseURL, err)
	}
	if u.Scheme != "http" || u.User != nil {
		return nil
	}
	if p, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || p != nil {
		return nil
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	c.h1 = newH1Pool(addr, u.Host, conns+16)
	c.h1.rx = c.rxHTTP
	c.path = u.RequestURI()
	c.hdr = []byte("Content-Type: application/json\r\nAccept: text/event-stream\r\n")
	if c.cfg.APIKey != "" {
		if strings.ContainsAny(c.cfg.APIKey, "\r\n") {
			return option.Errorf("%s must not contain line breaks", option.Name("APIKey"))
		}
		c.hdr = append(c.hdr, "Authorization: Bearer "+c.cfg.APIKey+"\r\n"...)
	}
	for _, h := range c.req.headers {
		c.hdr = append(c.hdr, h.Name+": "+h.Value+"\r\n"...)
	}
	return nil
}

// URL is the full request URL.
func (c *Client) URL() string { return c.url }

// Body returns the JSON request body for r. It is written by hand (the
// fields are fixed; only the strings need escaping): encoding/json's
// reflection was a tenth of the load generator's CPU per request at
// thousands of requests per second. TestBodyMatchesEncodingJSON checks that
// it decodes to what encoding/json would have written.
func (c *Client) Body(r Request) ([]byte, error) {
	if len(r.Images) > 0 && c.cfg.Endpoint != EndpointChat {
		return nil, fmt.Errorf("request %d: images need the chat endpoint", r.Index)
	}
	return c.appendBody(make([]byte, 0, len(r.Prompt)+imagesLen(r.Images)+len(c.cfg.Model)+192), r), nil
}

func (c *Client) appendBody(b []byte, r Request) []byte {
	b = append(b, `{"model":`...)
	b = appendJSONString(b, c.cfg.Model)
	if c.cfg.Endpoint == EndpointChat {
		b = append(b, `,"messages":[`...)
		if r.System != "" {
			b = append(b, `{"role":"system","content":`...)
			b = appendJSONString(b, r.System)
			b = append(b, "},"...)
		}
		for _, m := range r.History {
			b = append(b, `{"role":`...)
			b = appendJSONString(b, m.Role)
			b = append(b, `,"content":`...)
			b = appendJSONString(b, m.Content)
			b = append(b, "},"...)
		}
		b = append(b, `{"role":"user","content":`...)
		b = appendContent(b, r)
		b = append(b, "}]"...)
	} else {
		b = append(b, `,"prompt":`...)
		if r.System != "" || len(r.History) > 0 {
			b = appendJSONString(b, completionPrompt(r))
		} else {
			b = appendJSONString(b, r.Prompt)
		}
	}
	if r.MaxTokens != 0 {
		b = append(b, ',', '"')
		b = append(b, c.req.maxField...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, int64(r.MaxTokens), 10)
	}
	b = append(b, `,"stream":true,"stream_options":{"include_usage":true`...)
	if c.cfg.ContinuousUsage {
		b = append(b, `,"continuous_usage_stats":true`...)
	}
	b = append(b, '}')
	if r.IgnoreEOS {
		b = append(b, `,"ignore_eos":true`...)
	}
	b = append(b, c.req.extra...)
	return append(b, '}')
}

// appendContent appends the user message's content: the prompt as a
// string, or, with images, an array of content parts as OpenAI's chat API
// takes them: the prompt as a text part, then one image_url part per
// image.
func appendContent(b []byte, r Request) []byte {
	if len(r.Images) == 0 {
		return appendJSONString(b, r.Prompt)
	}
	b = append(b, `[{"type":"text","text":`...)
	b = appendJSONString(b, r.Prompt)
	b = append(b, '}')
	for _, im := range r.Images {
		b = append(b, ',')
		b = appendImage(b, im)
	}
	return append(b, ']')
}

// imagesLen is the bytes of the image URLs, to size a body.
func imagesLen(images []Image) int {
	n := 0
	for _, im := range images {
		n += len(im.URL) + 48
	}
	return n
}

// appendJSONString appends s as a JSON string: quotes, backslashes and
// control characters escaped, invalid UTF-8 replaced by U+FFFD as
// encoding/json does.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Do sends r and streams the answer into its record. start is the run's
// start, which the record's times count from; intended is when the
// schedule wanted the request sent. Do never returns an error: failures are
// classified in the record. A cancelled ctx makes the record
// report.ErrInterrupted. A request that fails or is cancelled mid-stream
// keeps what arrived (chunk times and tokens) and ends when it was given
// up.
func (c *Client) Do(ctx context.Context, r Request, start, intended time.Time) report.Record {
	a := c.do(ctx, r, nil)
	return c.record(a, start, intended)
}

// DoText is Do that also returns the answer's text and finish reason.
// Each chunk is then decoded with encoding/json (Do's scanner only
// counts the text's bytes): use it only when the text is wanted.
func (c *Client) DoText(ctx context.Context, r Request, start, intended time.Time) (report.Record, Text) {
	tb := &textBuilder{}
	a := c.do(ctx, r, tb)
	return c.record(a, start, intended), Text{Content: tb.content.String(), Reasoning: tb.reasoning.String(), FinishReason: tb.finish}
}

// record is the attempt's record, its times counted from start.
func (c *Client) record(a attempt, start, intended time.Time) report.Record {
	rel := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start)
	}
	rec := a.Record
	rec.Intended, rec.Sent, rec.FirstByte, rec.FirstToken, rec.End = rel(intended), rel(a.sent), rel(a.firstByte), rel(a.firstToken), rel(a.end)
	rec.FirstAnswerToken = rel(a.firstAnswer)
	if rec.Error != "" {
		rec.Error = c.scrub(rec.Error)
	}
	return rec
}

// redacted replaces the API key in error texts.
const redacted = "[REDACTED]"

// scrub removes the configured API key and secret header values from s:
// servers echo them in errors ("Incorrect API key provided: sk-...").
func (c *Client) scrub(s string) string {
	if c.cfg.APIKey != "" {
		s = strings.ReplaceAll(s, c.cfg.APIKey, redacted)
	}
	for _, v := range c.req.secrets {
		s = strings.ReplaceAll(s, v, redacted)
	}
	return s
}

func (c *Client) do(ctx context.Context, r Request, text *textBuilder) attempt {
	res := attempt{Record: report.Record{Index: r.Index, PrefixGroup: r.PrefixGroup, PrefixTokens: r.PrefixTokens, Images: len(r.Images)}, text: text}
	var (
		status int
		ctype  string
		rbody  io.ReadCloser
	)
	if c.h1 != nil {
		// The body is copied into the connection's request buffer: a
		// pooled buffer spares an allocation per request.
		bp := c.bodies.Get().(*[]byte)
		*bp = c.appendBody((*bp)[:0], r)
		res.sent = c.now()
		resp, err := c.h1.roundTrip(ctx, c.path, c.hdr, *bp, time.Now().Add(c.cfg.Timeout))
		c.bodies.Put(bp)
		if err != nil {
			res.end = c.now()
			c.fail(ctx, &res.Record, err, report.ErrConnect)
			return res
		}
		status, ctype, rbody = resp.status, resp.contentType, resp.body
		// The status line's arrival, when the connection knows it.
		res.firstByte = resp.body.LastArrival()
	} else {
		body, _ := c.Body(r)
		rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.url, bytes.NewReader(body))
		if err != nil {
			res.sent = c.now()
			res.end = res.sent
			res.ErrorClass, res.Error = report.ErrConnect, err.Error()
			return res
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		if c.cfg.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
		}
		c.SetHeaders(req.Header)
		// Which connection answers: its receive timestamps time the body.
		var rx *rxstamp.Conn
		if c.rxHTTP {
			req = req.WithContext(httptrace.WithClientTrace(rctx, &httptrace.ClientTrace{
				GotConn: func(info httptrace.GotConnInfo) { rx = rxConnOf(info.Conn) },
			}))
		}
		res.sent = c.now()
		resp, err := c.http.Do(req)
		if err != nil {
			res.end = c.now()
			c.fail(ctx, &res.Record, err, report.ErrConnect)
			return res
		}
		status, ctype, rbody = resp.StatusCode, resp.Header.Get("Content-Type"), resp.Body
		if rx != nil {
			rbody = &rxBody{ReadCloser: resp.Body, rx: rx}
			res.firstByte = rx.LastArrival()
		}
	}
	defer rbody.Close()
	if res.firstByte.IsZero() {
		res.firstByte = c.now()
	}
	res.Status = status
	if status != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(rbody, 4<<10))
		res.end = c.now()
		res.ErrorClass = statusClass(status)
		res.Error = fmt.Sprintf("HTTP %d: %s", status, c.errorMessage(msg))
		return res
	}
	if !isEventStream(ctype) {
		msg, _ := io.ReadAll(io.LimitReader(rbody, 4<<10))
		res.end = c.now()
		res.ErrorClass = report.ErrParse
		res.Error = fmt.Sprintf("expected Content-Type text/event-stream, got %q: %s", ctype, c.errorMessage(msg))
		return res
	}
	st := c.pool.Get().(*streamState)
	defer func() {
		st.rd.Reset(nil)
		c.pool.Put(st)
	}()
	st.rd.Reset(rbody)
	st.kernel, _ = rbody.(kernelStamped)
	c.stream(ctx, st, &res)
	if res.PromptTokens == 0 {
		res.PromptTokens = r.InputTokens // the server did not say: our estimate
	}
	res.RequestedInputTokens, res.RequestedOutputTokens = r.TargetInputTokens, r.MaxTokens
	if res.OK() {
		// Drain so the connection can be reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(rbody, 64<<10))
	}
	return res
}

// isEventStream reports whether a Content-Type is text/event-stream
// (parameters such as charset allowed).
func isEventStream(ctype string) bool {
	if ctype == "text/event-stream" || strings.HasPrefix(ctype, "text/event-stream;") {
		return true
	}
	ct, _, _ := mime.ParseMediaType(ctype)
	return ct == "text/event-stream"
}

func (c *Client) stream(ctx context.Context, st *streamState, res *attempt) {
	st.counts.reset()
	var (
		finished  bool
		lastUsage *Usage
		usage     Usage
	)
	// However the stream ends, the content chunks that arrived are
	// counted. The last usage seen is the request's total only once the
	// answer finished: mid-stream it is at best a per-chunk one.
	defer func() {
		final := lastUsage
		if !finished {
			final = nil
		}
		if n := len(st.counts.offsets); n > 0 {
			res.ChunkOffsets = append(make([]time.Duration, 0, n), st.counts.offsets...)
		}
		res.ChunkTokens, res.ChunkReasoningTokens = tokensPerChunk(&st.counts, final, c.cfg.ContinuousUsage, &res.Record)
	}()
	for {
		ev, err := st.rd.Next()
		if ev.At.Before(res.sent) && !ev.At.IsZero() {
			ev.At = res.sent // never before the request (clock steps)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				res.end = st.rd.LastRead()
				if res.end.IsZero() {
					res.end = c.now()
				}
				if finished {
					return
				}
				res.ErrorClass, res.Error = report.ErrStreamBroken, "stream ended without [DONE] or finish_reason"
				return
			}
			// Timed out, cancelled or cut: the request ends when it was
			// given up, not with the last byte that came.
			res.end = c.now()
			c.fail(ctx, &res.Record, err, report.ErrStreamBroken)
			return
		}
		if string(ev.Data) == "[DONE]" {
			res.end = ev.At
			finished = true
			return
		}
		if string(ev.Name) == "error" {
			res.end = ev.At
			res.ErrorClass = report.ErrStreamBroken
			res.Error = "error event: " + c.errorMessage(ev.Data)
			return
		}
		var p parsed
		if res.text == nil {
			p, err = parseChunk(ev.Data, &st.chunk)
		} else {
			// The text is wanted: encoding/json decodes its escapes.
			if p, err = parseChunkJSON(ev.Data, &st.chunk); err == nil {
				res.text.add(&st.chunk)
			}
		}
		if err != nil {
			res.end = ev.At
			res.ErrorClass, res.Error = report.ErrParse, err.Error()
			return
		}
		if p.err != nil {
			res.end = ev.At
			res.ErrorClass = apiErrorClass(p.err)
			res.Error = "error in stream: " + p.err.Message
			return
		}
		if res.Model == "" && len(p.model) > 0 {
			res.Model = string(p.model)
		}
		if p.sim != nil {
			res.Sim = p.sim
		}
		if p.hasUsage {
			usage = p.usage
			lastUsage = &usage
		}
		if n := p.answerBytes + p.reasoningBytes; n > 0 {
			if res.firstToken.IsZero() {
				res.firstToken = ev.At
				res.KernelTimestamps = st.kernel != nil && st.kernel.Kernel()
			}
			if p.answerBytes > 0 && res.firstAnswer.IsZero() {
				res.firstAnswer = ev.At
			}
			cc := &st.counts
			cc.offsets = append(cc.offsets, ev.At.Sub(res.sent))
			cc.bytes = append(cc.bytes, n)
			cc.reasoningBytes = append(cc.reasoningBytes, p.reasoningBytes)
			cum, cumR := -1, -1
			if p.hasUsage {
				cum = p.usage.CompletionTokens
				if p.usage.Reasoning {
					cumR = p.usage.ReasoningTokens
				}
			}
			cc.cum = append(cc.cum, cum)
			cc.cumReasoning = append(cc.cumReasoning, cumR)
		}
		if p.finished {
			finished = true
		}
		res.end = ev.At
	}
}

// tokensPerChunk decides how many output tokens each token-carrying chunk
// carried (toks) and how many of those were reasoning (rtoks, nil when no
// reasoning text came and the server counted none), and sets the
// result's token counts; see docs/loadgen-metrics.md. c holds the chunks'
// text bytes and reasoning bytes and the cumulative usage each carried,
// final the request's total usage (nil when the server sent none or the
// stream ended before the answer finished). Per-chunk usage counts only
// when it was asked for (trustCum) and actually grows: present on every
// chunk, never decreasing, at least one token on the first; otherwise the
// final usage is spread over the chunks by their bytes (its reasoning
// count over the reasoning bytes and the rest over the answer bytes, when
// the server gave one), and without it every chunk counts one token.
// Within a chunk that carried both, the reasoning share is by bytes unless
// per-chunk usage counted it.
func tokensPerChunk(c *chunkCounts, final *Usage, trustCum bool, res *report.Record) (toks, rtoks []int32) {
	bytes, rbytes := c.bytes, c.reasoningBytes
	n := len(bytes)
	toks = make([]int32, n)
	streamed := false // reasoning text came
	for _, b := range rbytes {
		streamed = streamed || b > 0
	}
	// The server's reasoning count, when it gave one that can be right (a
	// count of 0 while reasoning text came is none: SGLang sends 0 when it
	// does not count).
	reported := -1
	if final != nil && final.Reasoning && final.ReasoningTokens >= 0 && final.ReasoningTokens <= final.CompletionTokens &&
		(final.ReasoningTokens > 0 || !streamed) {
		reported = final.ReasoningTokens
	}
	if final != nil {
		res.PromptTokens = final.PromptTokens
		if c := final.PromptTokensDetails.CachedTokens; c.Set {
			v := c.V
			res.CachedTokens = &v
		}
	}
	defer func() {
		switch {
		case reported >= 0:
			res.ReasoningTokens = reported
		case rtoks != nil:
			res.ReasoningTokens = 0
			for _, r := range rtoks {
				res.ReasoningTokens += int(r)
			}
		}
	}()
	if trustCum && grows(c.cum) {
		prev := 0
		for i, x := range c.cum {
			toks[i] = int32(x - prev)
			prev = x
		}
		res.OutputTokens = prev
		if final != nil && final.CompletionTokens != prev {
			res.UsageMismatch = true
			res.OutputTokens = final.CompletionTokens
		}
		if r, last, ok := cumDeltas(c.cumReasoning, toks); ok && (streamed || last > 0) {
			rtoks = r
			if reported < 0 {
				reported = last
			}
		} else if streamed {
			rtoks = splitByBytes(toks, bytes, rbytes)
		}
		return toks, rtoks
	}
	if final != nil && reported >= 0 {
		// Reasoning over the reasoning bytes, the answer over the rest.
		abytes := make([]int, n)
		nr, na := 0, 0
		for i := range bytes {
			abytes[i] = bytes[i] - rbytes[i]
			if rbytes[i] > 0 {
				nr++
			}
			if abytes[i] > 0 {
				na++
			}
		}
		answer := final.CompletionTokens - reported
		if reported >= nr && answer >= na && (na > 0 || answer == 0) {
			r, a := share(rbytes, reported), share(abytes, answer)
			for i := range toks {
				toks[i] = r[i] + a[i]
			}
			if streamed {
				rtoks = r
			}
			res.OutputTokens = final.CompletionTokens
			return toks, rtoks
		}
		// The server's counts do not fit the stream: counted as below.
		res.UsageMismatch = true
	}
	switch {
	case final != nil && final.CompletionTokens >= n && (n > 0 || final.CompletionTokens == 0):
		res.OutputTokens = final.CompletionTokens
		distribute(toks, bytes, final.CompletionTokens)
	default:
		for i := range toks {
			toks[i] = 1
		}
		res.OutputTokens = n
		if final != nil {
			// The server counted fewer tokens than the chunks of text it sent.
			res.UsageMismatch = true
			res.OutputTokens = final.CompletionTokens
		} else {
			res.TokensEstimated = true
		}
	}
	if streamed {
		rtoks = splitByBytes(toks, bytes, rbytes)
	}
	return toks, rtoks
}

// cumDeltas turns cumulative per-chunk reasoning counts into each chunk's
// reasoning tokens, when they can be trusted: one for every chunk, never
// decreasing, never more than the chunk's tokens. last is the final count.
func cumDeltas(cum []int, toks []int32) (r []int32, last int, ok bool) {
	if len(cum) == 0 {
		return nil, 0, false
	}
	r = make([]int32, len(cum))
	prev := 0
	for i, x := range cum {
		d := x - prev
		if x < 0 || d < 0 || d > int(toks[i]) {
			return nil, 0, false
		}
		r[i] = int32(d)
		prev = x
	}
	return r, prev, true
}

// splitByBytes is the reasoning part of each chunk's tokens by its bytes:
// all of a reasoning-only chunk's, none of an answer-only one's, and a
// rounded share, leaving each side at least one when it can, of a chunk
// that carried both.
func splitByBytes(toks []int32, bytes, rbytes []int) []int32 {
	r := make([]int32, len(toks))
	for i, t := range toks {
		switch rb, b := rbytes[i], bytes[i]; {
		case rb == 0:
		case rb >= b:
			r[i] = t
		default:
			x := int32(math.Round(float64(t) * float64(rb) / float64(b)))
			if t >= 2 {
				x = min(max(x, 1), t-1)
			}
			r[i] = x
		}
	}
	return r
}

// share splits total tokens over the chunks with bytes, in proportion to
// their bytes, at least one each (distribute); chunks without bytes get
// none. The caller checks that total covers one per chunk with bytes.
func share(bytes []int, total int) []int32 {
	out := make([]int32, len(bytes))
	var idx, b []int
	for i, x := range bytes {
		if x > 0 {
			idx, b = append(idx, i), append(b, x)
		}
	}
	t := make([]int32, len(idx))
	distribute(t, b, total)
	for j, i := range idx {
		out[i] = t[j]
	}
	return out
}

// grows reports whether cumulative per-chunk counts can be trusted: one
// for every chunk, never decreasing, the first at least 1.
func grows(cum []int) bool {
	if len(cum) == 0 || cum[0] < 1 {
		return false
	}
	for i, c := range cum {
		if c < 0 || (i > 0 && c < cum[i-1]) {
			return false
		}
	}
	return true
}

// distribute splits total tokens over chunks in proportion to their bytes,
// at least one each, by largest remainder, so the counts sum to total.
func distribute(toks []int32, bytes []int, total int) {
	n := len(toks)
	if n == 0 {
		return
	}
	if total == n {
		for i := range toks {
			toks[i] = 1
		}
		return
	}
	extra := total - n
	sum := 0
	for _, b := range bytes {
		sum += b
	}
	given := 0
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, n)
	for i, b := range bytes {
		share := float64(extra) * float64(b) / float64(sum)
		whole := int(share)
		toks[i] = int32(1 + whole)
		given += whole
		rems[i] = rem{i, share - float64(whole)}
	}
	// Hand out what is left to the largest remainders (ties: earliest).
	for left := extra - given; left > 0; left-- {
		best := -1
		for j, r := range rems {
			if best < 0 || r.r > rems[best].r {
				best = j
			}
		}
		toks[rems[best].i]++
		rems[best].r = -1
	}
}

// fail classifies a transport error.
func (c *Client) fail(ctx context.Context, res *report.Record, err error, fallback string) {
	res.Error = err.Error()
	switch {
	case ctx.Err() != nil:
		res.ErrorClass = report.ErrInterrupted
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		res.ErrorClass = report.ErrTimeout
		res.Error = fmt.Sprintf("no complete answer within the request timeout %s", c.cfg.Timeout)
	case isConnect(err):
		res.ErrorClass = report.ErrConnect
	default:
		res.ErrorClass = fallback
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isConnect(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED)
}

func statusClass(code int) string {
	switch {
	case code == http.StatusTooManyRequests:
		return report.ErrHTTP429
	case code >= 500:
		return report.ErrHTTP5xx
	case code >= 400:
		return report.ErrHTTP4xx
	default:
		return report.ErrParse // 1xx/2xx other than 200, 3xx
	}
}

// apiErrorClass classifies an error object sent inside a stream by its
// code when it is an HTTP status, else as a broken stream.
func apiErrorClass(e *APIError) string {
	code, err := strconv.Atoi(strings.Trim(string(e.Code), `"`))
	if err == nil && code >= 400 && code < 600 {
		return statusClass(code)
	}
	return report.ErrStreamBroken
}

// errorMessage extracts the message of an OpenAI error body, or returns the
// (truncated) body itself, with the API key scrubbed before truncation so
// that no part of it survives a cut.
func (c *Client) errorMessage(b []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && len(e.Error) > 0 {
		var ae APIError
		if json.Unmarshal(e.Error, &ae) == nil && ae.Message != "" {
			return c.scrub(ae.Message)
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil {
			return c.scrub(s)
		}
	}
	s := c.scrub(strings.TrimSpace(string(b)))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
