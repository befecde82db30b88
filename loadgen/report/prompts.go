package report

// The types below describe the shared-prefix and image workloads
// (docs/loadgen.md, "Shared prefixes" and "Images") and what a run
// measured of the server's prefix cache and of the images it sent. Like
// TraceSettings they are values in Settings (absent from the JSON when
// unused) and optional pointers in Run.

// SharedPrefixSettings describe a shared-prefix workload
// (Settings.SharedPrefix): every prompt starts with one of Groups shared
// prefixes, its rest (the question) drawn as --input-tokens says.
type SharedPrefixSettings struct {
	// Groups is the number of distinct prefixes; Tokens their length
	// distribution in the server's tokens, drawn once per group.
	Groups int    `json:"groups"`
	Tokens string `json:"tokens"`
	// Pick is how a request picks its prefix: "uniform", "zipf:S" or
	// "round-robin", seeded by the run's seed.
	Pick string `json:"pick"`
}

// ImageSettings describe the images sent with every chat request
// (Settings.Images).
type ImageSettings struct {
	// PerRequest is the number of images in every request.
	PerRequest int `json:"per_request"`
	// Width, Height and Format ("png" or "jpeg") describe generated
	// images; Distinct is how many different ones are generated (request
	// i's k-th image is number (i × PerRequest + k) mod Distinct).
	Width    int    `json:"width,omitempty"`
	Height   int    `json:"height,omitempty"`
	Format   string `json:"format,omitempty"`
	Distinct int    `json:"distinct,omitempty"`
	// Files are the base names of the image files sent instead, comma
	// separated in the order they are used (a string: settings compare
	// with ==), and FilesSHA256 the hash of their contents' hashes in that
	// order.
	Files       string `json:"files,omitempty"`
	FilesSHA256 string `json:"files_sha256,omitempty"`
}

// PrefixCacheSummary is what a run measured of the server's prefix cache
// (Run.PrefixCache), over its completed measured requests.
type PrefixCacheSummary struct {
	// Requests counts the completed requests; Reported those whose usage
	// carried prompt_tokens_details.cached_tokens (vLLM with
	// --enable-prompt-tokens-details, OpenAI, the simulator).
	Requests int `json:"requests"`
	Reported int `json:"reported"`
	// PromptTokens and CachedTokens sum the prompt and cached tokens of the
	// requests that reported; HitRatio is CachedTokens / PromptTokens,
	// absent when none reported. RequestsWithHits counts the requests with
	// any cached token.
	PromptTokens     int64    `json:"prompt_tokens"`
	CachedTokens     int64    `json:"cached_tokens"`
	HitRatio         *float64 `json:"hit_ratio,omitempty"`
	RequestsWithHits int      `json:"requests_with_hits"`
	// CachedTokensPerRequest is the distribution of the reported cached
	// tokens.
	CachedTokensPerRequest Dist `json:"cached_tokens_per_request"`
	// ExpectedHitRatio is, for a shared-prefix workload, the share of the
	// completed requests' prompt tokens that an unbounded cache holding
	// whole prefixes would serve: every request whose prefix an earlier
	// sent request of the run used, its prefix tokens (asked for, in the
	// server's tokens), over all their prompt tokens. Absent otherwise.
	ExpectedHitRatio *float64 `json:"expected_hit_ratio,omitempty"`
	// Groups counts the distinct prefixes the completed requests used.
	Groups int `json:"groups,omitempty"`
}

// ImageSummary counts the images of a run's completed measured requests
// (Run.Images).
type ImageSummary struct {
	Requests int   `json:"requests"`
	Images   int64 `json:"images"`
	// PerRequest is the distribution of images per completed request.
	PerRequest Dist `json:"per_request"`
}

// PromptFigures are the prefix cache's and the images' figures of a run
// (Run.PrefixCache, Run.Images): absent (not zero) in runs without them.
var PromptFigures = []Figure{
	{Key: "prefix_cache.hit_ratio", Title: "Prefix cache hit ratio (server-reported)", Unit: "ratio", Better: Higher,
		read: func(r *Run) (float64, bool) {
			if p := r.PrefixCache; p != nil && p.HitRatio != nil {
				return *p.HitRatio, true
			}
			return 0, false
		}},
	{Key: "prefix_cache.expected_hit_ratio", Title: "Prefix cache hit ratio expected", Unit: "ratio",
		read: func(r *Run) (float64, bool) {
			if p := r.PrefixCache; p != nil && p.ExpectedHitRatio != nil {
				return *p.ExpectedHitRatio, true
			}
			return 0, false
		}},
	{Key: "prefix_cache.cached_tokens_per_request.mean", Title: "Cached tokens per request mean", Unit: "tokens",
		read: func(r *Run) (float64, bool) {
			if p := r.PrefixCache; p != nil && p.Reported > 0 {
				return p.CachedTokensPerRequest.Mean, true
			}
			return 0, false
		}},
	{Key: "images.per_request.mean", Title: "Images per request mean", Unit: "images",
		read: func(r *Run) (float64, bool) {
			if p := r.Images; p != nil {
				return p.PerRequest.Mean, true
			}
			return 0, false
		}},
}
