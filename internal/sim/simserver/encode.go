package simserver

import (
	"strconv"
)

// words are the simulated vocabulary: one token is one word, written with a
// leading space except at the start of the output.
var words = [...]string{
	"the", "model", "token", "stream", "batch", "cache", "latency", "prompt",
	"decode", "prefill", "tensor", "kernel", "memory", "bandwidth", "request", "queue",
	"server", "client", "answer", "question", "simple", "quick", "brown", "fox",
	"jumps", "over", "lazy", "dog", "and", "then", "runs", "away",
	"while", "every", "step", "adds", "one", "more", "word", "to",
	"a", "long", "sentence", "that", "never", "really", "ends", "because",
	"GPUs", "are", "fast", "but", "users", "want", "answers", "sooner",
	"so", "we", "measure", "time", "per", "output", "carefully", "here",
}

// appendTokens appends the text of output tokens [from, to) of r.
func appendTokens(b []byte, r *request, from, to int) []byte {
	for i := from; i < to; i++ {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, words[(r.wordOffset+i*7)%len(words)]...)
	}
	return b
}

// chunker writes the SSE events of one streamed response into byte
// buffers, without encoding/json, so a chunk costs no allocation.
type chunker struct {
	s      *Server
	r      *request
	o      streamOptions
	prefix []byte // `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`
	buf    []byte
}

func (c *chunker) appendPrefix(b []byte) []byte {
	b = append(b, `data: {"id":"`...)
	if c.o.chat {
		b = append(b, "chatcmpl-sim-"...)
	} else {
		b = append(b, "cmpl-sim-"...)
	}
	b = strconv.AppendUint(b, c.r.seq, 10)
	if c.o.chat {
		b = append(b, `","object":"chat.completion.chunk","created":`...)
	} else {
		b = append(b, `","object":"text_completion","created":`...)
	}
	b = strconv.AppendInt(b, c.r.arrival.Unix(), 10)
	b = append(b, `,"model":`...)
	b = append(b, c.s.modelJSON...)
	return append(b, `,"choices":[`...)
}

// cached, when not negative, is the prompt tokens the prefix cache
// served: usage.prompt_tokens_details.cached_tokens, as vLLM with
// --enable-prompt-tokens-details and OpenAI report it.
func appendUsage(b []byte, prompt, completion, cached int) []byte {
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	if cached >= 0 {
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(cached), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// cachedField is what appendUsage and usageJSON report of r's cached
// tokens: -1 (nothing) when the server omits the details.
func (s *Server) cachedField(r *request) int {
	if s.cfg.OmitCachedTokens {
		return -1
	}
	return r.servedTokens()
}

// appendRoleChunk appends vLLM's role-only first chunk.
func (c *chunker) appendRoleChunk(b []byte) []byte {
	b = append(b, c.prefix...)
	b = append(b, `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]`...)
	if c.o.continuous {
		b = append(b, ',')
		b = appendUsage(b, c.r.promptTokens, 0, -1)
	}
	return append(b, "}\n\n"...)
}

// appendContentChunk appends the chunk carrying tokens [from, to). The last
// one carries the finish reason, and the gpulens_sim timestamps when no
// usage chunk follows.
func (c *chunker) appendContentChunk(b []byte, from, to int, last bool, times, chunkTimes []int64) []byte {
	b = append(b, c.prefix...)
	if c.o.chat {
		b = append(b, `{"index":0,"delta":{`...)
		if from == 0 && !c.s.cfg.RoleChunk {
			b = append(b, `"role":"assistant",`...)
		}
		b = appendDelta(b, c.r, from, to) // reasoning.go
		b = append(b, `},"logprobs":null,"finish_reason":`...)
		b = appendFinish(b, c.r, last)
		b = append(b, "}]"...)
	} else {
		b = append(b, `{"index":0,"text":"`...)
		b = appendTokens(b, c.r, from, to)
		b = append(b, `","logprobs":null,"finish_reason":`...)
		b = appendFinish(b, c.r, last)
		b = append(b, `,"stop_reason":null}]`...)
	}
	if c.o.continuous {
		cached := -1 // the final usage only, as vLLM
		if last {
			cached = c.s.cachedField(c.r)
		}
		b = append(b, ',')
		b = appendReasoningUsage(appendUsage(b, c.r.promptTokens, to, cached), c.r, to)
	}
	if last && !c.o.includeUsage {
		b = append(b, ',')
		b = appendSim(b, c.r, times, chunkTimes)
	}
	return append(b, "}\n\n"...)
}

func appendFinish(b []byte, r *request, last bool) []byte {
	if !last {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = append(b, finishReason(r)...)
	return append(b, '"')
}

// appendUsageChunk appends the final usage chunk (empty choices) with the
// server-side timestamps.
func (c *chunker) appendUsageChunk(b []byte, times, chunkTimes []int64) []byte {
	b = append(b, c.prefix...)
	b = append(b, "],"...)
	b = appendReasoningUsage(appendUsage(b, c.r.promptTokens, len(times), c.s.cachedField(c.r)), c.r, len(times))
	b = append(b, ',')
	b = appendSim(b, c.r, times, chunkTimes)
	return append(b, "}\n\n"...)
}

// appendSim appends the "gpulens_sim" member: the server's timestamps of
// the request (see docs/simserver.md).
func appendSim(b []byte, r *request, times, chunkTimes []int64) []byte {
	b = append(b, `"gpulens_sim":{"request_seq":`...)
	b = strconv.AppendUint(b, r.seq, 10)
	b = append(b, `,"arrival_unix_nano":`...)
	b = strconv.AppendInt(b, r.arrival.UnixNano(), 10)
	b = append(b, `,"first_token_unix_nano":`...)
	if len(times) > 0 {
		b = strconv.AppendInt(b, times[0], 10)
	} else {
		b = append(b, '0')
	}
	b = appendInts(append(b, `,"token_unix_nanos":`...), times)
	b = appendInts(append(b, `,"chunk_unix_nanos":`...), chunkTimes)
	return append(b, '}')
}

func appendInts(b []byte, v []int64) []byte {
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, x, 10)
	}
	return append(b, ']')
}

// SimInfo is the "gpulens_sim" member added to the final chunk of a stream
// (the usage chunk when stream_options.include_usage is set) and to
// non-streaming responses: the server's own timestamps of the request, in
// Unix nanoseconds.
type SimInfo struct {
	RequestSeq         uint64  `json:"request_seq"`
	ArrivalUnixNano    int64   `json:"arrival_unix_nano"`
	FirstTokenUnixNano int64   `json:"first_token_unix_nano"`
	TokenUnixNanos     []int64 `json:"token_unix_nanos"`
	// ChunkUnixNanos are the times the content chunks were written, one
	// per chunk (streaming only).
	ChunkUnixNanos []int64 `json:"chunk_unix_nanos,omitempty"`
}

func simInfo(r *request, times, chunkTimes []int64) *SimInfo {
	si := &SimInfo{RequestSeq: r.seq, ArrivalUnixNano: r.arrival.UnixNano(), TokenUnixNanos: times, ChunkUnixNanos: chunkTimes}
	if len(times) > 0 {
		si.FirstTokenUnixNano = times[0]
	}
	if si.TokenUnixNanos == nil {
		si.TokenUnixNanos = []int64{}
	}
	return si
}

type usageJSON struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails *promptTokensDetail `json:"prompt_tokens_details,omitempty"`
	Details             *completionDetails  `json:"completion_tokens_details,omitempty"`
}

type promptTokensDetail struct {
	CachedTokens int `json:"cached_tokens"`
}

type chatMessage struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	Reasoning string `json:"reasoning,omitempty"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   usageJSON    `json:"usage"`
	Sim     *SimInfo     `json:"gpulens_sim"`
}

type textChoice struct {
	Index        int       `json:"index"`
	Text         string    `json:"text"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason string    `json:"finish_reason"`
	StopReason   *string   `json:"stop_reason"`
}

type textResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []textChoice `json:"choices"`
	Usage   usageJSON    `json:"usage"`
	Sim     *SimInfo     `json:"gpulens_sim"`
}
