package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestRenderPrompts: the page shows the shared-prefix and image settings
// and, per run, the server-reported hit ratio beside the expected one and
// the images; a page without them has no such section.
func TestRenderPrompts(t *testing.T) {
	doc := report.Document{Runs: []report.Run{{Name: "concurrency=4",
		Settings: report.Settings{SharedPrefix: report.SharedPrefixSettings{Groups: 8, Tokens: "fixed:1000", Pick: "zipf:1.1"},
			Images: report.ImageSettings{PerRequest: 2, Width: 512, Height: 512, Format: "png", Distinct: 16}},
		PrefixCache: &report.PrefixCacheSummary{Requests: 40, Reported: 40, PromptTokens: 44000, CachedTokens: 30800, HitRatio: new(0.7),
			ExpectedHitRatio: new(0.72), RequestsWithHits: 32, CachedTokensPerRequest: report.Dist{Count: 40, Mean: 770}},
		Images: &report.ImageSummary{Requests: 40, Images: 80, PerRequest: report.Dist{Count: 40, Mean: 2, Max: 2}}}}}
	var buf bytes.Buffer
	if err := Render(&buf, &doc); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, want := range []string{
		"<h2>Prefix cache and images</h2>",
		"8 groups of fixed:1000 tokens, picked zipf:1.1",
		"2 per request: 16 generated png of 512x512",
		"40 of 40", "30800 of 44000 (mean 770 per request)", "70.0 %", "72.0 %", ">32<", "80 (2.00 per request, max 2)",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	buf.Reset()
	doc.Runs[0].PrefixCache, doc.Runs[0].Images = nil, nil
	if err := Render(&buf, &doc); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "Prefix cache and images") {
		t.Error("a page without them has the section")
	}
}
