package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/option"
)

// simFlags are the flags of `gpulens-loadgen sim`.
type simFlags struct {
	listenAddress   string
	shutdownTimeout time.Duration
	cfg             simserver.Config
	gpu             simserver.GPUTie
}

// gpuTieFlagNames are the flags of the GPU tie (simserver.GPUTie).
var gpuTieFlagNames = map[option.Name]string{
	"ExporterURL": "--sim.gpu.exporter-url",
	"GPU":         "--sim.gpu",
	"PID":         "--sim.gpu.pid",
	"Interval":    "--sim.gpu.poll-interval",
	"StaleAfter":  "--sim.gpu.stale-after",
}

func addSimFlags(cmd *kingpin.CmdClause) *simFlags {
	f := &simFlags{}
	c := &f.cfg
	d := simserver.DefaultConfig()
	cmd.Flag("sim.listen-address", "Address to serve the simulated OpenAI-compatible API, /health and /metrics on.").Default("127.0.0.1:8000").StringVar(&f.listenAddress)
	cliflag.Duration(cmd, "sim.shutdown-timeout", "How long to let streams in progress finish on shutdown before cutting them.", "5s", &f.shutdownTimeout)
	cmd.Flag("sim.model", "Model name served and listed by /v1/models.").Default(d.Model).StringVar(&c.Model)
	cmd.Flag("sim.seed", "Seed for output lengths, token text, jitter and faults: the n-th request always gets the same draws.").Default(fmt.Sprint(d.Seed)).Uint64Var(&c.Seed)
	cliflag.Duration(cmd, "sim.prefill-per-token", "Prefill time per prompt token, added to the step that admits a request.", d.PrefillPerToken.String(), &c.PrefillPerToken)
	cliflag.Duration(cmd, "sim.decode-base", "Fixed part of one decode step.", d.DecodeBase.String(), &c.DecodeBase)
	cliflag.Duration(cmd, "sim.decode-per-seq", "Decode step time added per running sequence.", d.DecodePerSeq.String(), &c.DecodePerSeq)
	cmd.Flag("sim.max-batch", "Most sequences running at once (0: unlimited).").Default(fmt.Sprint(d.MaxBatch)).IntVar(&c.MaxBatch)
	cmd.Flag("sim.kv-capacity-tokens", "KV-cache capacity in tokens; a running request holds prompt + output tokens (0: unlimited).").Default(fmt.Sprint(d.KVCapacityTokens)).IntVar(&c.KVCapacityTokens)
	cmd.Flag("sim.max-queue", "Most requests waiting for admission; more get HTTP 429 (0: unlimited).").Default(fmt.Sprint(d.MaxQueue)).IntVar(&c.MaxQueue)
	cmd.Flag("sim.jitter", "Relative jitter of every simulated delay, uniform in [1-j, 1+j].").Default(fmt.Sprint(d.Jitter)).Float64Var(&c.Jitter)
	cliflag.Duration(cmd, "sim.ttft", "Fixed mode: time to first token after admission (fixed mode is on when --sim.ttft or --sim.itl is non-zero).", "0s", &c.FixedTTFT)
	cliflag.Duration(cmd, "sim.itl", "Fixed mode: time between output tokens.", "0s", &c.FixedITL)
	cmd.Flag("sim.output-tokens-mean", "Mean output length without ignore_eos (geometric distribution, capped by max_tokens).").Default(fmt.Sprint(d.OutputTokensMean)).IntVar(&c.OutputTokensMean)
	cmd.Flag("sim.max-output-tokens", "Output cap for requests without max_tokens.").Default(fmt.Sprint(d.MaxOutputTokens)).IntVar(&c.MaxOutputTokens)
	cmd.Flag("sim.tokens-per-chunk", "Tokens per streamed content chunk after the first.").Default(fmt.Sprint(d.TokensPerChunk)).IntVar(&c.TokensPerChunk)
	cmd.Flag("sim.role-chunk", "Send vLLM's role-only first chunk on arrival (--no-sim.role-chunk puts the role on the first content chunk).").Default(fmt.Sprint(d.RoleChunk)).BoolVar(&c.RoleChunk)
	cmd.Flag("sim.reasoning-tokens", "Act as a reasoning model: every chat answer starts with N tokens of thinking before the answer (max_tokens caps both), streamed in delta.reasoning (as vLLM with a reasoning parser) and counted in usage.completion_tokens_details.reasoning_tokens; a request turns it off with chat_template_kwargs.enable_thinking=false (0: no reasoning).").Default("0").IntVar(&c.ReasoningTokens)
	cmd.Flag("sim.continuous-usage", "Add cumulative usage to every chunk, as vLLM's continuous_usage_stats.").Default(fmt.Sprint(d.ContinuousUsage)).BoolVar(&c.ContinuousUsage)
	cmd.Flag("sim.error-rate", "Probability that a request fails with HTTP 500.").Default("0").Float64Var(&c.ErrorRate)
	cmd.Flag("sim.disconnect-rate", "Probability that a response is cut off before its end.").Default("0").Float64Var(&c.DisconnectRate)
	cmd.Flag("sim.stall-rate", "Probability that a request stalls once, before a random output token.").Default("0").Float64Var(&c.StallRate)
	cliflag.Duration(cmd, "sim.stall-duration", "Duration of a stall.", d.StallDuration.String(), &c.StallDuration)
	cmd.Flag("sim.prefix-cache-tokens", "Prefix cache size in tokens: a prompt that starts like a recent one prefills only the rest (0: no prefix cache).").Default(fmt.Sprint(d.PrefixCacheTokens)).IntVar(&c.PrefixCacheTokens)
	cmd.Flag("sim.prefix-block-tokens", "Block size of the prefix cache in tokens: prefixes are cached and matched in whole blocks.").Default(fmt.Sprint(d.PrefixBlockTokens)).IntVar(&c.PrefixBlockTokens)
	cmd.Flag("sim.omit-cached-tokens", "Leave usage.prompt_tokens_details.cached_tokens (the prompt tokens the prefix cache served) out of the usage, as vLLM does unless started with --enable-prompt-tokens-details.").Default(fmt.Sprint(d.OmitCachedTokens)).BoolVar(&c.OmitCachedTokens)
	cmd.Flag("sim.tokenizer", "How the simulated server counts prompt tokens: subword (a sub-word tokenizer, about 1.3 tokens per English word, plus a Llama-3-like chat template: 1 + 5 per message + 4 tokens; vLLM's POST /tokenize answers with the same count) or words (one token per word, no template).").Default(simserver.TokenizerSubword).EnumVar(&c.Tokenizer, simserver.TokenizerSubword, simserver.TokenizerWords)
	g := &f.gpu
	cmd.Flag("sim.gpu.exporter-url", "Tie the simulated GPU's speed to a GPU a gpulens exporter reports (its /metrics URL): every step takes 1 + the SM utilisation of the GPU's other processes times as long, so a neighbour joining shows as contention on the exporter and as latency here. Empty: alone on the GPU.").PlaceHolder("URL").StringVar(&g.ExporterURL)
	cmd.Flag("sim.gpu", "With --sim.gpu.exporter-url: the GPU, by index or UUID; several separated by commas (0,1,2,3) for a tensor-parallel server whose every step waits for the slowest of them.").Default("0").StringVar(&g.GPU)
	cmd.Flag("sim.gpu.pid", "With --sim.gpu.exporter-url: the process on the GPU the server stands for (in a simulated fleet, the serving tenant it replaces), not counted as a neighbour; several separated by commas (one per GPU of a tensor-parallel server).").PlaceHolder("PID").StringVar(&g.PID)
	cliflag.Duration(cmd, "sim.gpu.poll-interval", "With --sim.gpu.exporter-url: how often to read the exporter.", "2s", &g.Interval)
	cliflag.Duration(cmd, "sim.gpu.stale-after", "With --sim.gpu.exporter-url: how long the last reading holds while the exporter cannot be read, before running as if alone.", "30s", &g.StaleAfter)
	return f
}

// simCommand is `gpulens-loadgen sim`: the simulated inference server.
func simCommand(app *kingpin.Application) command {
	cmd := app.Command("sim", "Run a simulated OpenAI-compatible inference server (continuous batching, fault injection, vLLM-style /metrics).")
	f := addSimFlags(cmd)
	return command{clause: cmd, run: func(ctx context.Context, logger *slog.Logger) error {
		s, err := simserver.New(f.cfg, logger)
		if err != nil {
			return flagged(simFlagNames, err)
		}
		tied := f.gpu.ExporterURL != ""
		if tied {
			if err := f.gpu.Validate(); err != nil {
				return flagged(gpuTieFlagNames, fmt.Errorf("invalid GPU tie: %w", err))
			}
		}
		ln, err := new(net.ListenConfig).Listen(ctx, "tcp", f.listenAddress)
		if err != nil {
			return fmt.Errorf("--sim.listen-address: %w", err)
		}
		cfg := s.Config()
		logger.Info("simulated inference server listening", "address", ln.Addr().String(), "model", cfg.Model,
			"fixed_mode", cfg.Fixed(), "max_batch", cfg.MaxBatch, "seed", cfg.Seed)
		if tied {
			logger.Info("simulated GPU tied to an exporter's GPU", "url", f.gpu.ExporterURL, "gpu", f.gpu.GPU, "pid", f.gpu.PID, "poll_interval", f.gpu.Interval)
			tieCtx, stopTie := context.WithCancel(ctx)
			tieDone := make(chan struct{})
			go func() { defer close(tieDone); _ = f.gpu.Run(tieCtx, s, logger) }()
			defer func() { stopTie(); <-tieDone }()
		}
		return serveSim(ctx, ln, s, f.shutdownTimeout, logger)
	}}
}

// serveSim serves s on ln until ctx is cancelled, then shuts down: it stops
// accepting connections, lets streams in progress finish for up to
// shutdownTimeout, and cuts the rest.
func serveSim(ctx context.Context, ln net.Listener, s *simserver.Server, shutdownTimeout time.Duration, logger *slog.Logger) error {
	// Arrivals are stamped with the kernel's receive time of each request
	// (simserver.Listener), not when its handler got a CPU.
	ln = simserver.Listener(ln)
	srv := &http.Server{
		Handler:           s.Handler(),
		ConnContext:       simserver.ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelError),
	}
	schedCtx, stopSched := context.WithCancel(context.Background())
	defer stopSched()
	schedDone := make(chan error, 1)
	go func() { schedDone <- s.Run(schedCtx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- srv.Serve(ln) }()

	select {
	case err := <-serveDone:
		s.Close()
		return fmt.Errorf("serving: %w", err)
	case err := <-schedDone:
		_ = srv.Close()
		return fmt.Errorf("scheduler: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down simulated server", "timeout", shutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("streams still open after the shutdown timeout; cutting them")
		s.Close()
		err = srv.Close()
	}
	s.Close()
	stopSched()
	_ = <-schedDone // the scheduler stopped by its cancelled context: waited for
	if err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}
