package main

import "github.com/gpulens/gpulens/loadgen/option"

// The libraries name their options in errors as their configurations do
// (package option); these maps spell each option as the flag that sets it.
// TestOptionFlagNamesComplete fails on an option a library names that its
// command's map does not spell.

// loadFlagNames are the options of run, sweep and merge, and the
// settings (campaign.Settings) their flags fill one for one.
var loadFlagNames = map[option.Name]string{
	"BaseURL":        "--target",
	"Target":         "--target",
	"Model":          "--model",
	"APIKeyFile":     "--api-key-file",
	"TLSCAFile":      "--tls.ca-file",
	"SLO":            "--slo",
	"InputTokens":    "--input-tokens",
	"OutputTokens":   "--output-tokens",
	"Endpoint":       "--endpoint",
	"Timeout":        "--timeout",
	"APIKey":         "the API key (--api-key-file or $OPENAI_API_KEY)",
	"Levels":         "the levels (--concurrency or --rate)",
	"Mode":           "the mode",
	"Offsets":        "--trace",
	"Concurrency":    "--concurrency",
	"Rate":           "--rate",
	"Arrival":        "--arrival",
	"Burstiness":     "--burstiness",
	"MaxConcurrency": "--max-concurrency",
	"Duration":       "--duration",
	"Requests":       "--requests",
	"Warmup":         "--warmup",
	"RampUp":         "--ramp-up",
	"GracePeriod":    "--grace-period",
	"Shard":          "--shard",
	"GPUHourlyUSD":   "--cost.gpu-hourly-usd",
	"GPUs":           "--cost.gpus",
	"OverheadHours":  "--cost.overhead-hours",
	"EmbedRequests":  "--embed-requests",
	"Repeats":        "--repeats",
	"MaxTokens":      "--max-tokens",
	"PromptNonce":    "--prompt-nonce",
	"Prompts":        "--prompts",
	"Calibrate":      "--input-tokens.calibrate",
	// The calibration's time limit (flags.go), request control
	// (requestflags.go).
	"CalibrateTimeout":   "--input-tokens.calibrate-timeout",
	"ExtraBody":          "--request.extra-body",
	"Headers":            "--request.header",
	"MaxTokensField":     "--request.max-tokens-field",
	"SystemPrompt":       "--request.system-prompt",
	"SystemPromptTokens": "--request.system-prompt-tokens",
	"SecretHeaders":      "--request.secret-header",
	// Per-run GPU side (evalflags.go).
	"ExporterURL":      "--exporter.url",
	"ExporterInterval": "--exporter.poll-interval",
	"ExporterGPUs":     "--exporter.gpus",
	// Manifest (evalflags.go).
	"ServerInfoTimeout": "--server-info.timeout",
	"Labels":            "--label",
	"SaveResponses":     "--save-responses",
	"ResponsePrompts":   "--save-responses.prompts",
	// Trace replay, multi-turn conversations, server metrics
	// (workloadflags.go).
	"Trace":                 "--trace",
	"TraceFormat":           "--trace.format",
	"TraceSpeedup":          "--trace.speedup",
	"TraceMaxRequests":      "--trace.max-requests",
	"Dataset":               "--dataset",
	"Turns":                 "--turns",
	"ThinkTime":             "--think-time",
	"ServerMetricsURL":      "--server-metrics.url",
	"ServerMetricsInterval": "--server-metrics.interval",
	// Shared prefixes and images (promptflags.go).
	"SharedPrefixGroups": "--shared-prefix.groups",
	"SharedPrefixTokens": "--shared-prefix.tokens",
	"SharedPrefixPick":   "--shared-prefix.pick",
	"ImagesPerRequest":   "--image.count",
	"ImageSize":          "--image.size",
	"ImageFormat":        "--image.format",
	"ImageDistinct":      "--image.distinct",
	"ImageFiles":         "--image.file",
}

// simFlagNames are the options of sim (simserver.Config).
var simFlagNames = map[option.Name]string{
	"PrefillPerToken":  "--sim.prefill-per-token",
	"DecodeBase":       "--sim.decode-base",
	"DecodePerSeq":     "--sim.decode-per-seq",
	"FixedTTFT":        "--sim.ttft",
	"FixedITL":         "--sim.itl",
	"StallDuration":    "--sim.stall-duration",
	"MaxBatch":         "--sim.max-batch",
	"KVCapacityTokens": "--sim.kv-capacity-tokens",
	"MaxQueue":         "--sim.max-queue",
	"OutputTokensMean": "--sim.output-tokens-mean",
	"MaxOutputTokens":  "--sim.max-output-tokens",
	"TokensPerChunk":   "--sim.tokens-per-chunk",
	"ReasoningTokens":  "--sim.reasoning-tokens",
	"Jitter":           "--sim.jitter",
	"ErrorRate":        "--sim.error-rate",
	"DisconnectRate":   "--sim.disconnect-rate",
	"StallRate":        "--sim.stall-rate",
	// The prefix cache (internal/sim/simserver/prefixcache.go).
	"PrefixCacheTokens": "--sim.prefix-cache-tokens",
	"PrefixBlockTokens": "--sim.prefix-block-tokens",
	"Tokenizer":         "--sim.tokenizer",
}

// flagged returns err with the options it names spelled as flags.
func flagged(flags map[option.Name]string, err error) error {
	return option.Rename(err, func(n option.Name) string { return flags[n] })
}
