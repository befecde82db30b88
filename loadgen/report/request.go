package report

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// RequestSettings are what every request carried besides its prompt and
// lengths (--request.* flags): zero, and absent from the JSON, when
// nothing was added.
type RequestSettings struct {
	// ExtraBody is the JSON object merged into every request body
	// (compact, keys sorted).
	ExtraBody JSONText `json:"extra_body,omitempty"`
	// Headers are the extra request headers as a JSON array of
	// "Name: value" strings, a secret value (Authorization, api-key, a
	// name with token, key, secret, … or named secret) replaced by
	// [REDACTED].
	Headers JSONText `json:"headers,omitempty"`
	// MaxTokensField is the body field that carried each request's
	// output length: max_tokens or max_completion_tokens.
	MaxTokensField string `json:"max_tokens_field,omitempty"`
	// SystemPromptTokens is the system prompt's length asked for, in the
	// server's tokens (a generated one); SystemPromptSHA256 and
	// SystemPromptChars identify the text sent (given or generated).
	SystemPromptTokens int    `json:"system_prompt_tokens,omitempty"`
	SystemPromptSHA256 string `json:"system_prompt_sha256,omitempty"`
	SystemPromptChars  int    `json:"system_prompt_chars,omitempty"`
}

// JSONText is JSON kept as its compact text, written into a report as
// JSON (not as a string): a value that settings can compare with ==.
type JSONText string

// MarshalJSON writes the text as it is (null when empty).
func (t JSONText) MarshalJSON() ([]byte, error) {
	if t == "" {
		return []byte("null"), nil
	}
	if !json.Valid([]byte(t)) {
		return nil, fmt.Errorf("invalid JSON text %q", string(t))
	}
	return []byte(t), nil
}

// UnmarshalJSON keeps the JSON compact ("" for null).
func (t *JSONText) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*t = ""
		return nil
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b); err != nil {
		return err
	}
	*t = JSONText(c.String())
	return nil
}
