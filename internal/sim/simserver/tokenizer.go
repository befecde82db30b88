package simserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"unicode"
	"unicode/utf8"
)

// Tokenizers of Config.Tokenizer.
const (
	// TokenizerSubword (the default) counts tokens as a sub-word
	// tokenizer does, unlike one word per token (see countSubword), and
	// adds a Llama-3-like chat template's tokens to a chat request.
	TokenizerSubword = "subword"
	// TokenizerWords counts one token per whitespace-separated word and
	// no template (the simulator before issue 23), for tests that want
	// round numbers.
	TokenizerWords = "words"
)

// The simulated chat template, shaped like Llama 3's: a BOS token, then
// per message "<|start_header_id|>ROLE<|end_header_id|>\n\n" (4 tokens)
// and "<|eot_id|>" after its content (1), then the assistant's header to
// generate from (4). A completions prompt gets the BOS token only.
const (
	templateBOS        = 1
	templatePerMessage = 5
	templateGeneration = 4
)

// ChatTemplateTokens is what the simulated subword tokenizer's chat
// template adds to a chat request of n messages.
func ChatTemplateTokens(n int) int { return templateBOS + templatePerMessage*n + templateGeneration }

// countSubword counts the tokens of one whitespace-separated word as a
// byte-pair tokenizer of a ~128k vocabulary roughly does: a run of
// letters takes one token per four letters or part of it ("the" 1,
// "university" 3), a run of digits one per three digits or part (as Llama
// 3 and GPT-4 split numbers), any other character one token ("-", ",").
// A word after the first also carries its leading space inside its first
// token, as such tokenizers do: no extra token.
func countSubword(word []byte) int {
	n := 0
	kind, run := 0, 0 // 1 letters, 2 digits
	flush := func() {
		switch kind {
		case 1:
			n += (run + 3) / 4
		case 2:
			n += (run + 2) / 3
		}
		kind, run = 0, 0
	}
	for i := 0; i < len(word); {
		r, size := rune(word[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(word[i:])
		}
		i += size
		k := 0
		switch {
		case unicode.IsLetter(r):
			k = 1
		case unicode.IsDigit(r):
			k = 2
		}
		if k != kind {
			flush()
		}
		if k == 0 {
			n++
			continue
		}
		kind = k
		run++
	}
	flush()
	return n
}

// tokenCounter counts the tokens of a prompt or of a chat request's
// messages with the configured tokenizer.
type tokenCounter struct{ words bool }

func newTokenCounter(name string) tokenCounter { return tokenCounter{words: name == TokenizerWords} }

// serveTokenize answers vLLM's POST /tokenize: {"model", "prompt"} or
// {"model", "messages"} (the chat template applied, as vLLM does unless
// "add_generation_prompt" is false), with {"count", "max_model_len",
// "tokens"}. The token ids are positions, not a vocabulary's: only the
// count means anything.
func (s *Server) serveTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model               string            `json:"model"`
		Prompt              json.RawMessage   `json:"prompt"`
		Messages            []json.RawMessage `json:"messages"`
		AddGenerationPrompt *bool             `json:"add_generation_prompt"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("invalid JSON body: %v", err))
		return
	}
	if req.Model != "" && req.Model != s.cfg.Model {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	walk := s.newWalk(false)
	switch {
	case len(req.Messages) > 0:
		if err := walk.chat(req.Messages, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
			return
		}
	case len(req.Prompt) > 0 && string(req.Prompt) != "null":
		if err := validatePrompt(req.Prompt); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
			return
		}
		if err := walk.prompt(req.Prompt); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", err.Error())
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "prompt or messages: required")
		return
	}
	n := walk.n
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"count": n, "max_model_len": maxModelLen, "tokens": ids})
}

// maxModelLen is the context length /tokenize reports.
const maxModelLen = 131072
