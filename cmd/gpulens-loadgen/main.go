// Command gpulens-loadgen drives sustained traffic at OpenAI-compatible
// inference servers, measures TTFT, inter-token latency, tokens/s and cost
// per request, exposes them on /metrics and writes reports. It also embeds a
// simulated inference server (`sim`).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
)

// command is one kingpin subcommand and the function that runs it once its
// flags are parsed. ctx is cancelled on SIGINT/SIGTERM.
type command struct {
	clause *kingpin.CmdClause
	run    func(ctx context.Context, logger *slog.Logger) error
}

func main() {
	os.Exit(runMain(os.Args[1:]))
}

func runMain(args []string) int {
	app := kingpin.New("gpulens-loadgen", "Load generator and simulated server for OpenAI-compatible inference endpoints.")
	promslogConfig := &promslog.Config{}
	flag.AddFlags(app, promslogConfig)
	app.Version(version.Print("gpulens-loadgen"))
	app.HelpFlag.Short('h')

	// Each subcommand registers itself here.
	commands := []command{
		runCommand(app),
		sweepCommand(app),
		simCommand(app),
		reportCommand(app),
		mergeCommand(app),
	}

	selected, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpulens-loadgen: %v\n", err)
		return 2
	}
	logger := promslog.New(promslogConfig)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, c := range commands {
		if c.clause.FullCommand() == selected {
			if err := c.run(ctx, logger); err != nil {
				logger.Error("command failed", "command", selected, "err", err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "gpulens-loadgen: unknown command %q\n", selected)
	return 2
}
