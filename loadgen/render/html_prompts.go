package render

import (
	"fmt"
	"strconv"

	"github.com/gpulens/gpulens/loadgen/report"
)

// promptRow is one run's prefix cache and images, formatted.
type promptRow struct {
	Name                                       string
	Reported, Cached, HitRatio, Expected, Hits string
	Images                                     string
}

// promptRows are the rows of the "Prefix cache and images" table: the
// runs that have either.
func promptRows(runs []report.Run) []promptRow {
	pct := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.1f %%", *v*100)
	}
	var out []promptRow
	for _, r := range runs {
		p, im := r.PrefixCache, r.Images
		if p == nil && im == nil {
			continue
		}
		row := promptRow{Name: r.Name, Reported: "–", Cached: "–", HitRatio: "–", Expected: "–", Hits: "–", Images: "–"}
		if p != nil {
			row.Reported = fmt.Sprintf("%d of %d", p.Reported, p.Requests)
			if p.Reported > 0 {
				row.Cached = fmt.Sprintf("%d of %d (mean %.0f per request)", p.CachedTokens, p.PromptTokens, p.CachedTokensPerRequest.Mean)
				row.Hits = strconv.Itoa(p.RequestsWithHits)
			}
			row.HitRatio, row.Expected = pct(p.HitRatio), pct(p.ExpectedHitRatio)
		}
		if im != nil {
			row.Images = fmt.Sprintf("%d (%.2f per request, max %.0f)", im.Images, im.PerRequest.Mean, im.PerRequest.Max)
		}
		out = append(out, row)
	}
	return out
}

// promptSettingsRows are the settings rows of the shared prefixes and
// images.
func promptSettingsRows(s report.Settings) []kv {
	var out []kv
	if p := s.SharedPrefix; p.Groups > 0 {
		out = append(out, kv{"Shared prefixes", fmt.Sprintf("%d groups of %s tokens, picked %s", p.Groups, p.Tokens, p.Pick)})
	}
	if im := s.Images; im.PerRequest > 0 {
		v := fmt.Sprintf("%d per request: files %s", im.PerRequest, im.Files)
		if im.Files == "" {
			v = fmt.Sprintf("%d per request: %d generated %s of %dx%d", im.PerRequest, im.Distinct, im.Format, im.Width, im.Height)
		}
		out = append(out, kv{"Images", v})
	}
	return out
}
