package client

import (
	"encoding/json"
	"fmt"

	"github.com/gpulens/gpulens/loadgen/report"
)

// Usage is the OpenAI usage object.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// PromptTokensDetails.CachedTokens is the prompt tokens the server's
	// prefix cache served (OpenAI; vLLM with
	// --enable-prompt-tokens-details).
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
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
	Usage   *Usage                `json:"usage"`
	Error   json.RawMessage       `json:"error"`
	Sim     *report.SimTimestamps `json:"gpulens_sim"`
}

// parsed is what the runner needs from one chunk.
type parsed struct {
	// model aliases the event data on the fast path: copy it before the
	// next event is read.
	model        []byte
	contentBytes int  // bytes of generated text (content, reasoning, text)
	finished     bool // a choice carried a finish_reason
	hasUsage     bool
	usage        Usage
	err          *APIError
	sim          *report.SimTimestamps
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
		p.hasUsage, p.usage = true, *c.Usage
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
		for _, s := range [...]*string{ch.Delta.Content, ch.Delta.ReasoningContent, ch.Delta.Reasoning, ch.Text} {
			if s != nil {
				p.contentBytes += len(*s)
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			p.finished = true
		}
	}
	return p, nil
}
