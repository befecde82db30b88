package simserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpulens/gpulens/internal/rxstamp"
)

const (
	// maxBodyBytes bounds a request body.
	maxBodyBytes = 64 << 20 // room for images as data: URLs
	// maxPrealloc bounds the token timestamps allocated up front.
	maxPrealloc = 4096
)

// Server is the simulated inference server. Its handler serves requests;
// Run drives the scheduler and must be running for generations to progress.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	metrics *metrics
	mux     *http.ServeMux
	started time.Time

	seq    atomic.Uint64 // next request sequence number
	queued atomic.Int64  // received, not yet admitted

	slowdown slowdown // SetSlowdown
	tokens   tokenCounter
	images   *imageCache // decoded image_url parts (prompt.go)

	inMu  sync.Mutex
	inbox []*request
	wake  chan struct{} // capacity 1

	closeOnce sync.Once
	closed    chan struct{}

	modelJSON []byte // the model name as a JSON string
}

// New validates cfg and returns a server. It does not start the scheduler:
// call Run.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid simulator config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	mj, err := json.Marshal(cfg.Model)
	if err != nil {
		return nil, fmt.Errorf("encoding model name: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		tokens:    newTokenCounter(cfg.Tokenizer),
		images:    newImageCache(),
		logger:    logger,
		metrics:   newMetrics(cfg.Model),
		started:   time.Now(),
		wake:      make(chan struct{}, 1),
		closed:    make(chan struct{}),
		modelJSON: mj,
	}
	s.slowdown.set(1)
	s.metrics.slowdown.Set(1)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.serveGenerate(w, r, false) })
	mux.HandleFunc("GET /v1/models", s.serveModels)
	mux.HandleFunc("POST /tokenize", s.serveTokenize) // vLLM's (tokenizer.go)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	s.serveIdentity(mux) // GET /version, /info, /props, /api/version, /api/tags, /get_server_info; POST /api/show
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelError)}))
	s.mux = mux
	return s, nil
}

// Handler returns the HTTP handler of the OpenAI-compatible API, /health
// and /metrics.
func (s *Server) Handler() http.Handler { return s.mux }

// Config returns the validated configuration.
func (s *Server) Config() Config { return s.cfg }

// Close aborts every request still in progress and stops Run. It is safe to
// call more than once.
func (s *Server) Close() { s.closeOnce.Do(func() { close(s.closed) }) }

// Run drives the scheduler until ctx is cancelled or Close is called.
func (s *Server) Run(ctx context.Context) error {
	e := newEngine(&s.cfg, s.metrics, &s.queued)
	e.slowdown = &s.slowdown
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var inbox []*request
	for {
		s.inMu.Lock()
		inbox, s.inbox = s.inbox, inbox[:0]
		s.inMu.Unlock()
		for i, r := range inbox {
			e.enqueue(r)
			inbox[i] = nil
		}
		e.advance(time.Now())
		next, ok := e.next()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-s.closed:
				return nil
			case <-s.wake:
			}
			continue
		}
		d := time.Until(next)
		if d <= 0 {
			continue
		}
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return nil
		case <-s.closed:
			return nil
		case <-timer.C:
		case <-s.wake:
		}
	}
}

func (s *Server) submit(r *request) {
	s.inMu.Lock()
	s.inbox = append(s.inbox, r)
	s.inMu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// generateRequest is the part of a chat or text completion request the
// simulator reads.
type generateRequest struct {
	Model               string            `json:"model"`
	Messages            []json.RawMessage `json:"messages"`
	Prompt              json.RawMessage   `json:"prompt"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	IgnoreEOS           bool              `json:"ignore_eos"`
	Seed                *int64            `json:"seed"`
	Temperature         *float64          `json:"temperature"`
	Stream              bool              `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
}

// Listener wraps ln so that the simulator stamps each request's arrival
// with the kernel's receive time of its bytes (internal/rxstamp) rather than
// when its handler started, which on a busy machine can be milliseconds
// later. It needs ConnContext as the http.Server's ConnContext.
func Listener(ln net.Listener) net.Listener { return rxstamp.Listener{Listener: ln} }

type connKey struct{}

// ConnContext is the http.Server ConnContext that goes with Listener.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if rc, ok := c.(*rxstamp.Conn); ok {
		return context.WithValue(ctx, connKey{}, rc)
	}
	return ctx
}

// arrivalTime is when the request on hr arrived: the receive time of the
// newest byte read from its connection when the server was set up with
// Listener and ConnContext, else now.
func arrivalTime(hr *http.Request) time.Time {
	now := time.Now()
	if rc, ok := hr.Context().Value(connKey{}).(*rxstamp.Conn); ok {
		if at := rc.LastArrival(); !at.IsZero() && at.Before(now) {
			return at
		}
	}
	return now
}

func (s *Server) serveGenerate(w http.ResponseWriter, hr *http.Request, chat bool) {
	arrival := arrivalTime(hr)
	body, err := io.ReadAll(http.MaxBytesReader(w, hr.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("reading request body: %v", err))
		return
	}
	var req generateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("parsing request body: %v", err))
		return
	}
	if req.Model != s.cfg.Model {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	walk := s.newWalk(true)
	if chat {
		if len(req.Messages) == 0 {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "messages: must contain at least one message")
			return
		}
		if err := walk.chat(req.Messages, true); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
			return
		}
	} else {
		if len(req.Prompt) == 0 || string(req.Prompt) == "null" {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "prompt: required")
			return
		}
		if err := validatePrompt(req.Prompt); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
			return
		}
		if err := walk.prompt(req.Prompt); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
			return
		}
	}
	prompt := walk.n
	maxTokens := s.cfg.MaxOutputTokens
	for _, p := range []*int{req.MaxTokens, req.MaxCompletionTokens} {
		if p != nil {
			if *p < 1 {
				writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("max_tokens must be at least 1, got %d", *p))
				return
			}
			maxTokens = *p
		}
	}

	seq := s.seq.Add(1) - 1
	r := &request{
		seq:          seq,
		arrival:      arrival,
		promptTokens: prompt,
		rng:          rand.New(rand.NewPCG(s.cfg.Seed, seq)),
		notify:       make(chan struct{}, 1),
	}
	r.blocks = walk.blocks
	fail := r.draw(&s.cfg, maxTokens, req.IgnoreEOS, answerRand(&req))
	s.think(r, body, chat, maxTokens, req.IgnoreEOS) // reasoning.go
	if fail {
		s.metrics.faults.WithLabelValues(faultError).Inc()
		writeError(w, http.StatusInternalServerError, "InternalServerError", "", "simulated internal error (the configured error rate)")
		return
	}
	if s.cfg.KVCapacityTokens > 0 && r.kv > s.cfg.KVCapacityTokens {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion).",
				s.cfg.KVCapacityTokens, r.kv, r.promptTokens, r.target))
		return
	}
	if !s.reserveQueueSlot() {
		s.metrics.faults.WithLabelValues(faultQueueFull).Inc()
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "", fmt.Sprintf("simulated server queue is full (%d waiting)", s.cfg.MaxQueue))
		return
	}
	if r.stallAt >= 0 {
		s.metrics.faults.WithLabelValues(faultStall).Inc()
	}
	s.metrics.promptTokens.Add(float64(prompt))
	// Preallocate for typical outputs only: a huge max_tokens must not
	// allocate up front. The slice stays append-only either way.
	r.times = make([]int64, 0, min(r.target, maxPrealloc))

	h := w.Header()
	h.Set("X-Sim-Arrival", strconv.FormatInt(arrival.UnixNano(), 10))
	h.Set("X-Sim-Request-Seq", strconv.FormatUint(seq, 10))
	defer r.gone.Store(true)
	if req.Stream {
		o := streamOptions{chat: chat}
		if req.StreamOptions != nil {
			o.includeUsage = req.StreamOptions.IncludeUsage
			o.continuous = req.StreamOptions.ContinuousUsageStats
		}
		o.continuous = o.continuous || s.cfg.ContinuousUsage
		s.stream(hr.Context(), w, r, o)
		return
	}
	s.respond(hr.Context(), w, r, chat)
}

// reserveQueueSlot counts a new waiting request, or reports that the queue
// is full.
func (s *Server) reserveQueueSlot() bool {
	for {
		q := s.queued.Load()
		if s.cfg.MaxQueue > 0 && q >= int64(s.cfg.MaxQueue) {
			return false
		}
		if s.queued.CompareAndSwap(q, q+1) {
			return true
		}
	}
}

// wait blocks until r has produced more than have tokens, has finished, or
// must be abandoned (client gone, server closed).
func (s *Server) wait(ctx context.Context, r *request, have int) ([]int64, bool, error) {
	for {
		times, finished := r.snapshot()
		if len(times) > have || finished {
			return times, finished, nil
		}
		select {
		case <-r.notify:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-s.closed:
			return nil, false, errors.New("server closed")
		}
	}
}

// abort cuts the connection without finishing the response.
func (s *Server) abort(r *request) {
	r.gone.Store(true)
	panic(http.ErrAbortHandler)
}

func (s *Server) respond(ctx context.Context, w http.ResponseWriter, r *request, chat bool) {
	s.submit(r)
	var times []int64
	for {
		t, finished, err := s.wait(ctx, r, len(times))
		if err != nil {
			if ctx.Err() == nil {
				s.abort(r)
			}
			return
		}
		times = t
		if r.disconnectAt >= 0 && len(times) >= r.disconnectAt {
			s.metrics.faults.WithLabelValues(faultDisconnect).Inc()
			s.abort(r)
		}
		if finished {
			break
		}
	}
	thinking, text := splitAnswer(r, len(times))
	reason := finishReason(r)
	usage := usageJSON{PromptTokens: r.promptTokens, TotalTokens: r.promptTokens + len(times), CompletionTokens: len(times),
		Details: reasoningDetails(r, len(times))}
	if c := s.cachedField(r); c >= 0 {
		usage.PromptTokensDetails = &promptTokensDetail{CachedTokens: c}
	}
	sim := simInfo(r, times, nil)
	created := r.arrival.Unix()
	var resp any
	if chat {
		resp = chatResponse{ID: "chatcmpl-sim-" + strconv.FormatUint(r.seq, 10), Object: "chat.completion", Created: created,
			Model: s.cfg.Model, Choices: []chatChoice{{Message: chatMessage{Role: "assistant", Content: text, Reasoning: thinking}, FinishReason: reason}},
			Usage: usage, Sim: sim}
	} else {
		resp = textResponse{ID: "cmpl-sim-" + strconv.FormatUint(r.seq, 10), Object: "text_completion", Created: created,
			Model: s.cfg.Model, Choices: []textChoice{{Text: text, FinishReason: reason}}, Usage: usage, Sim: sim}
	}
	b, err := json.Marshal(resp)
	if err != nil {
		s.logger.Error("encoding response", "err", err)
		writeError(w, http.StatusInternalServerError, "InternalServerError", "", "encoding response")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}

type streamOptions struct {
	chat, includeUsage, continuous bool
}

func (s *Server) stream(ctx context.Context, w http.ResponseWriter, r *request, o streamOptions) {
	f, _ := w.(http.Flusher)
	flush := func() {
		if f != nil {
			f.Flush()
		}
	}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	c := chunker{s: s, r: r, o: o}
	c.prefix = c.appendPrefix(make([]byte, 0, 128))
	c.buf = make([]byte, 0, 512)
	if o.chat && s.cfg.RoleChunk {
		c.buf = c.appendRoleChunk(c.buf[:0])
		_, _ = w.Write(c.buf)
	}
	flush()
	s.submit(r)

	chunkTimes := make([]int64, 0, min(1+(r.target-1)/s.cfg.TokensPerChunk+1, maxPrealloc))
	written, seen := 0, 0
	for {
		if r.disconnectAt >= 0 && written >= r.disconnectAt {
			s.metrics.faults.WithLabelValues(faultDisconnect).Inc()
			s.abort(r)
		}
		times, finished, err := s.wait(ctx, r, seen)
		if err != nil {
			if ctx.Err() == nil {
				s.abort(r)
			}
			return
		}
		n := len(times)
		seen = n
		c.buf = c.buf[:0]
		now := time.Now().UnixNano()
		for written < n {
			k := 1
			if written > 0 {
				k = min(s.cfg.TokensPerChunk, n-written)
				if k < s.cfg.TokensPerChunk && !finished {
					break // wait for a full chunk
				}
			}
			if r.disconnectAt >= 0 && written+k > r.disconnectAt && written < r.disconnectAt {
				k = r.disconnectAt - written // cut inside this chunk
			}
			last := finished && written+k == n
			chunkTimes = append(chunkTimes, now)
			c.buf = c.appendContentChunk(c.buf, written, written+k, last, times, chunkTimes)
			written += k
			if r.disconnectAt >= 0 && written >= r.disconnectAt {
				break
			}
		}
		if finished && written == n {
			if o.includeUsage {
				c.buf = c.appendUsageChunk(c.buf, times, chunkTimes)
			}
			c.buf = append(c.buf, "data: [DONE]\n\n"...)
			_, _ = w.Write(c.buf)
			flush()
			return
		}
		if len(c.buf) > 0 {
			if _, err := w.Write(c.buf); err != nil {
				return
			}
			flush()
		}
	}
}

func finishReason(r *request) string {
	if r.lengthCapped {
		return "length"
	}
	return "stop"
}

func (s *Server) serveModels(w http.ResponseWriter, _ *http.Request) {
	resp := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list", Data: []modelCard{{ID: s.cfg.Model, Object: "model", Created: s.started.Unix(), OwnedBy: "gpulens", Root: s.cfg.Model}}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
}

// writeError writes an OpenAI-style error object.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    any     `json:"code"`
		} `json:"error"`
	}
	e.Error.Message, e.Error.Type = msg, typ
	if code != "" {
		e.Error.Code = code
	}
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// validatePrompt accepts what the OpenAI completions API takes as a prompt:
// a string, an array of strings, an array of token ids or an array of
// arrays of token ids.
func validatePrompt(raw json.RawMessage) error {
	const want = "prompt: must be a string, an array of strings, an array of token ids or an array of arrays of token ids"
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		return nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil {
		return nil
	}
	var idss [][]uint32
	if json.Unmarshal(raw, &idss) == nil {
		return nil
	}
	return errors.New(want)
}

// validateContent accepts a chat message's content: a string, an array
// of content parts or strings, or null (an assistant message with tool
// calls).
func validateContent(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == '"' || raw[0] == '[' || string(raw) == "null" {
		return nil
	}
	return errors.New("content: must be a string or an array of content parts")
}
