package stats

import (
	"math"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestPrefixCache(t *testing.T) {
	rec := func(i int, sent time.Duration, group, prefix, prompt int, cached *int, class string) report.Record {
		return report.Record{Index: i, Sent: sent, PrefixGroup: group, PrefixTokens: prefix, PromptTokens: prompt, CachedTokens: cached, ErrorClass: class}
	}
	recs := []report.Record{
		// Listed out of send order: request 2 (group 1) was sent first.
		rec(0, 2*time.Millisecond, 1, 100, 150, new(96), ""),
		rec(1, 3*time.Millisecond, 2, 60, 110, new(0), ""),
		rec(2, 1*time.Millisecond, 1, 100, 140, new(0), ""),
		// Failed: not counted, but its prefix was sent, so group 2's
		// next request (4) is expected to hit.
		rec(3, 4*time.Millisecond, 2, 60, 0, nil, report.ErrHTTP5xx),
		rec(4, 5*time.Millisecond, 2, 60, 100, new(48), ""),
		// The server said nothing for this one.
		rec(5, 6*time.Millisecond, 1, 100, 130, nil, ""),
		{Index: 6, Sent: 7 * time.Millisecond, PrefixGroup: 3, PrefixTokens: 10, ErrorClass: report.ErrInterrupted},
	}
	s := PrefixCache(recs)
	if s == nil {
		t.Fatal("nil summary")
	}
	if s.Requests != 5 || s.Reported != 4 || s.PromptTokens != 150+110+140+100 || s.CachedTokens != 96+48 || s.RequestsWithHits != 2 || s.Groups != 2 {
		t.Errorf("summary %+v", s)
	}
	if s.HitRatio == nil || *s.HitRatio != 144.0/500 {
		t.Errorf("hit ratio %v, want %v", s.HitRatio, 144.0/500)
	}
	// Expected: requests 0 (group 1 after 2), 4 (group 2 after 1 and 3)
	// and 5 (group 1) hit their prefixes: (100+60+100) / (150+110+140+100+130).
	if want := 260.0 / 630; s.ExpectedHitRatio == nil || *s.ExpectedHitRatio != want {
		t.Errorf("expected hit ratio %v, want %v", s.ExpectedHitRatio, want)
	}
	if s.CachedTokensPerRequest.Count != 4 || s.CachedTokensPerRequest.Max != 96 {
		t.Errorf("cached tokens per request %+v", s.CachedTokensPerRequest)
	}

	// Nothing reported, no shared prefix: nothing to say.
	if s := PrefixCache([]report.Record{{PromptTokens: 5}}); s != nil {
		t.Errorf("plain run: %+v, want nil", s)
	}
	// Reported without a shared prefix: a hit ratio, no expectation.
	if s := PrefixCache([]report.Record{{PromptTokens: 50, CachedTokens: new(25)}}); s == nil || *s.HitRatio != 0.5 || s.ExpectedHitRatio != nil {
		t.Errorf("reported only: %+v", s)
	}

	agg := AggregatePrefixCache([]report.Run{{PrefixCache: s}, {}, {PrefixCache: &report.PrefixCacheSummary{Requests: 2, Reported: 2, PromptTokens: 150, CachedTokens: 25, HitRatio: new(25.0 / 150), CachedTokensPerRequest: report.Dist{Count: 2, Max: 20}}}})
	if agg == nil || agg.Requests != 7 || agg.Reported != 6 || math.Abs(*agg.HitRatio-(144.0/500+25.0/150)/2) > 1e-12 || agg.CachedTokensPerRequest.Max != 96 ||
		agg.CachedTokensPerRequest.Count != 6 || *agg.ExpectedHitRatio != 260.0/630 {
		t.Errorf("aggregate %+v", agg)
	}
}

func TestImages(t *testing.T) {
	recs := []report.Record{{Images: 2}, {Images: 1}, {Images: 3, ErrorClass: report.ErrHTTP4xx}, {Images: 0}}
	s := Images(recs)
	if s == nil || s.Requests != 3 || s.Images != 3 || s.PerRequest.Max != 2 || s.PerRequest.Mean != 1 {
		t.Fatalf("images %+v", s)
	}
	if Images([]report.Record{{}}) != nil {
		t.Error("no images: want nil")
	}
	if a := AggregateImages([]report.Run{{Images: s}, {Images: s}}); a == nil || a.Images != 6 || a.Requests != 6 {
		t.Errorf("aggregate %+v", a)
	}
}
