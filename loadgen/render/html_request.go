package render

import (
	"fmt"

	"github.com/gpulens/gpulens/loadgen/report"
)

// requestSettingsRows are the settings rows of what every request carried
// besides its prompt (--request.*); none when nothing was added.
func requestSettingsRows(r report.RequestSettings) []kv {
	var out []kv
	if r.ExtraBody != "" {
		out = append(out, kv{"Extra body", string(r.ExtraBody)})
	}
	if r.Headers != "" {
		out = append(out, kv{"Extra headers", string(r.Headers)})
	}
	if r.MaxTokensField != "" {
		out = append(out, kv{"Output-length field", r.MaxTokensField})
	}
	switch {
	case r.SystemPromptTokens > 0:
		out = append(out, kv{"System prompt", fmt.Sprintf("%d tokens, generated (SHA-256 %.12s…)", r.SystemPromptTokens, r.SystemPromptSHA256)})
	case r.SystemPromptChars > 0:
		out = append(out, kv{"System prompt", fmt.Sprintf("%d characters (SHA-256 %.12s…)", r.SystemPromptChars, r.SystemPromptSHA256)})
	}
	return out
}
