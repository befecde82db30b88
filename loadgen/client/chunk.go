package client

import (
	"encoding/json"
	"fmt"

	"github.com/gpulens/gpulens/loadgen/report"
)

// Usage is what the client reads of an OpenAI usage object.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// PromptTokensDetails.CachedTokens is the prompt tokens the server's
	// prefix cache served (OpenAI; vLLM with
	// --enable-prompt-tokens-details).
	PromptTokensDetails PromptTokensDetails
	// ReasoningTokens is the part of CompletionTokens the server counted
	// as reasoning, when Reasoning says it gave a count:
	// usage.completion_tokens_details.reasoning_tokens (OpenAI, OpenRouter,
	// the simulator), else usage.reasoning_tokens (SGLang).
	ReasoningTokens int
	Reasoning       bool
}

// PromptTokensDetails is usage.prompt_tokens_details.
type PromptTokensDetails struct {
	CachedTokens OptInt `json:"cached_tokens"`
}

// OptInt is an integer that may be absent: Set is false when the JSON had
// no value or null. A value, not a pointer: decoding it allocates nothing
// and Usage stays comparable.
type OptInt struct {
	V   int
	Set bool
}

// UnmarshalJSON decodes an integer; null leaves o alone, as encoding/json
// leaves any field alone on null.
func (o *OptInt) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if err := json.Unmarshal(b, &o.V); err != nil {
		return err
	}
	o.Set = true
	return nil
}

// usageJSON is the usage object as encoding/json decodes it.
type usageJSON struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
	ReasoningTokens     *int                `json:"reasoning_tokens"`
	Details             *struct {
		ReasoningTokens *int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *usageJSON) usage() Usage {
	out := Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, PromptTokensDetails: u.PromptTokensDetails}
	switch {
	case u.Details != nil && u.Details.ReasoningTokens != nil:
		out.ReasoningTokens, out.Reasoning = *u.Details.ReasoningTokens, true
	case u.ReasoningTokens != nil:
		out.ReasoningTokens, out.Reasoning = *u.ReasoningTokens, true
	}
	return out
}

// APIError is an OpenAI-style error object, sent as a whole response body
// or as a stream event.
type APIError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

type chunkDelta struct {
	Role             *string `json:"role"`
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
}

type chunkChoice struct {
	Delta        chunkDelta `json:"delta"`
	Text         *string    `json:"text"`
	FinishReason *string    `json:"finish_reason"`
}

// chunk is one streamed chat.completion.chunk or text_completion object.
type chunk struct {
	Model   string                `json:"model"`
	Choices []chunkChoice         `json:"choices"`
	Usage   *usageJSON            `json:"usage"`
	Error   json.RawMessage       `json:"error"`
	Sim     *report.SimTimestamps `json:"gpulens_sim"`
}

// parsed is what the runner needs from one chunk.
type parsed struct {
	// model aliases the event data on the fast path: copy it before the
	// next event is read.
	model []byte
	// answerBytes are the bytes of answer text (content, text),
	// reasoningBytes those of reasoning text (reasoning_content,
	// reasoning: once when a delta carries the same text in both, as vLLM
	// versions that kept the old name alongside the new one do).
	answerBytes    int
	reasoningBytes int
	finished       bool // a choice carried a finish_reason
	hasUsage       bool
	usage          Usage
	err            *APIError
	sim            *report.SimTimestamps
}

// reasoningText returns the reasoning text of a delta: reasoning_content
// and reasoning, once when both carry the same text.
func reasoningText(a, b *string) (first, second string) {
	var x, y string
	if a != nil {
		x = *a
	}
	if b != nil {
		y = *b
	}
	if x != "" && x == y {
		return x, ""
	}
	return x, y
}

// parseChunk decodes one chunk: with the allocation-free scanner
// (scan.go) for the common shapes, with encoding/json for anything the
// scanner is not sure about (errors, simulator timestamps, escapes in keys,
// duplicate or differently-cased keys, non-integer counts, invalid JSON).
func parseChunk(data []byte, c *chunk) (parsed, error) {
	var p parsed
	if scanChunk(data, &p) {
		return p, nil
	}
	return parseChunkJSON(data, c)
}

// parseChunkJSON decodes one chunk with encoding/json.
func parseChunkJSON(data []byte, c *chunk) (parsed, error) {
	// encoding/json decodes into the slice elements left between len and
	// cap without zeroing them: clear them so a choice never inherits the
	// previous chunk's content or finish_reason.
	clear(c.Choices[:cap(c.Choices)])
	*c = chunk{Choices: c.Choices[:0]}
	if err := json.Unmarshal(data, c); err != nil {
		return parsed{}, fmt.Errorf("decoding stream chunk: %w", err)
	}
	p := parsed{sim: c.Sim}
	if c.Model != "" {
		p.model = []byte(c.Model)
	}
	if c.Usage != nil {
		p.hasUsage, p.usage = true, c.Usage.usage()
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		var e APIError
		if err := json.Unmarshal(c.Error, &e); err != nil {
			// {"error": "message"} as some servers send.
			var s string
			if err2 := json.Unmarshal(c.Error, &s); err2 != nil {
				return parsed{}, fmt.Errorf("decoding error object in stream: %w", err)
			}
			e.Message = s
		}
		p.err = &e
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		for _, s := range [...]*string{ch.Delta.Content, ch.Text} {
			if s != nil {
				p.answerBytes += len(*s)
			}
		}
		x, y := reasoningText(ch.Delta.ReasoningContent, ch.Delta.Reasoning)
		p.reasoningBytes += len(x) + len(y)
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			p.finished = true
		}
	}
	return p, nil
}
