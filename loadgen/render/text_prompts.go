package render

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// writePrompts prints, for the runs that have them, what the server said
// of its prefix cache (the share of prompt tokens it reported cached,
// against the share a shared-prefix workload expects) and the images per
// request.
func writePrompts(w io.Writer, d *report.Document) {
	var withCache, withImages bool
	for _, r := range d.Runs {
		withCache = withCache || r.PrefixCache != nil
		withImages = withImages || r.Images != nil
	}
	if withCache {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\treported\tcached tokens\tprompt tokens\thit ratio\texpected\trequests hit\t")
		for _, r := range d.Runs {
			p := r.PrefixCache
			if p == nil {
				continue
			}
			fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%s\t%s\t%d\t\n", r.Name, p.Reported, p.Requests, p.CachedTokens, p.PromptTokens,
				pct(p.HitRatio), pct(p.ExpectedHitRatio), p.RequestsWithHits)
		}
		tw.Flush()
		fmt.Fprintln(w, "(prefix cache: the prompt tokens the server's usage reported cached, prompt_tokens_details.cached_tokens)")
		for _, r := range d.Runs {
			if p := r.PrefixCache; p != nil && p.Reported == 0 && !r.Aggregate {
				fmt.Fprintf(w, "NOTE: %s: the server reported no cached tokens (vLLM reports them when started with --enable-prompt-tokens-details)\n", r.Name)
			}
		}
	}
	if withImages {
		for _, r := range d.Runs {
			if p := r.Images; p != nil {
				fmt.Fprintf(w, "images: %s: %d in %d requests, %.2f per request (max %.0f)\n", r.Name, p.Images, p.Requests, p.PerRequest.Mean, p.PerRequest.Max)
			}
		}
	}
}

// pct formats a ratio as a percentage, "-" when unknown.
func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *v*100)
}
