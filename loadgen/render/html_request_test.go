package render

import (
	"bytes"
	"html"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestRenderRequestSettings: the page's settings show what every request
// carried besides its prompt, the secret header as recorded (redacted).
func TestRenderRequestSettings(t *testing.T) {
	doc := report.Document{Runs: []report.Run{{Name: "run", Settings: report.Settings{Mode: report.ModeClosed, Request: report.RequestSettings{
		ExtraBody: `{"seed":1,"temperature":0}`, Headers: `["X-Tenant: a","Authorization: [REDACTED]"]`, MaxTokensField: "max_completion_tokens",
		SystemPromptTokens: 40, SystemPromptSHA256: "0123456789abcdef0123"}}}}}
	var buf bytes.Buffer
	if err := Render(&buf, &doc); err != nil {
		t.Fatal(err)
	}
	page := html.UnescapeString(buf.String())
	for _, want := range []string{"Extra body", `{"seed":1,"temperature":0}`, "Extra headers", `["X-Tenant: a","Authorization: [REDACTED]"]`,
		"Output-length field", "max_completion_tokens", "40 tokens, generated (SHA-256 0123456789ab…)"} {
		if !strings.Contains(page, want) {
			t.Errorf("page does not show %q", want)
		}
	}
}
