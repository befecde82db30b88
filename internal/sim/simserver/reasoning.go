package simserver

import (
	"encoding/json"
	"strconv"
)

// A reasoning model (Config.ReasoningTokens): the first tokens of a chat
// answer are its thinking, streamed as vLLM streams a reasoning parser's
// output, in delta.reasoning (docs/simserver.md, "Reasoning"), and
// counted in the usage as OpenAI counts them:
// completion_tokens_details.reasoning_tokens, part of completion_tokens.
// A request turns it off as Qwen3's chat template does, with
// "chat_template_kwargs": {"enable_thinking": false}.

// reasoningRequest is the part of a chat request that turns thinking off.
type reasoningRequest struct {
	ChatTemplateKwargs struct {
		EnableThinking *bool `json:"enable_thinking"`
	} `json:"chat_template_kwargs"`
}

// think makes r, whose output length was drawn (request.draw), a
// reasoning model's answer when the server is one
// (Config.ReasoningTokens) and the request is a chat request that did not
// turn thinking off: Config.ReasoningTokens tokens of thinking come before
// the answer it drew, max_tokens capping both together (with ignore_eos
// the output is max_tokens long either way: the thinking takes its first
// tokens). Text completions never reason (vLLM parses reasoning for chat
// only).
func (s *Server) think(r *request, body []byte, chat bool, maxTokens int, ignoreEOS bool) {
	if !chat || s.cfg.ReasoningTokens == 0 {
		return
	}
	var req reasoningRequest
	if json.Unmarshal(body, &req) == nil {
		if e := req.ChatTemplateKwargs.EnableThinking; e != nil && !*e {
			return
		}
	}
	if !ignoreEOS && !r.lengthCapped {
		r.target += s.cfg.ReasoningTokens
		if r.target >= maxTokens {
			r.target, r.lengthCapped = maxTokens, true
		}
		r.kv = r.promptTokens + r.target
	}
	r.reasoning = min(s.cfg.ReasoningTokens, r.target)
}

// appendDelta appends the delta members of a chat chunk carrying tokens
// [from, to): its reasoning tokens in "reasoning", its answer tokens in
// "content"; a chunk across the boundary carries both, as vLLM's does
// when one step decodes several tokens.
func appendDelta(b []byte, r *request, from, to int) []byte {
	if mid := min(max(r.reasoning, from), to); mid > from {
		b = append(b, `"reasoning":"`...)
		b = appendTokens(b, r, from, mid)
		b = append(b, '"')
		if mid == to {
			return b
		}
		b = append(b, ',')
		from = mid
	}
	b = append(b, `"content":"`...)
	at := len(b)
	b = appendTokens(b, r, from, to)
	if from > 0 && from == r.reasoning && b[at] == ' ' {
		b = append(b[:at], b[at+1:]...) // the answer starts where the thinking ended (splitAnswer)
	}
	return append(b, '"')
}

// appendReasoningUsage adds, to a usage object just appended (ending in
// '}'), the reasoning count of its first completion tokens, when r
// reasons.
func appendReasoningUsage(b []byte, r *request, completion int) []byte {
	if r.reasoning == 0 {
		return b
	}
	b = append(b[:len(b)-1], `,"completion_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, int64(min(r.reasoning, completion)), 10)
	return append(b, "}}"...)
}

// completionDetails is usage.completion_tokens_details.
type completionDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// reasoningDetails is the non-streaming usage's details for n tokens of
// r, nil when r does not reason.
func reasoningDetails(r *request, n int) *completionDetails {
	if r.reasoning == 0 {
		return nil
	}
	return &completionDetails{ReasoningTokens: min(r.reasoning, n)}
}

// splitAnswer returns the reasoning text and the answer text of n tokens
// of r.
func splitAnswer(r *request, n int) (reasoning, content string) {
	k := min(r.reasoning, n)
	if k == 0 {
		return "", string(appendTokens(nil, r, 0, n))
	}
	rb := appendTokens(nil, r, 0, k)
	cb := appendTokens(nil, r, k, n)
	if len(cb) > 0 && cb[0] == ' ' {
		cb = cb[1:] // the answer's text starts where the thinking ended
	}
	return string(rb), string(cb)
}
