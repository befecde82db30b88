// Command gpulens-loadgen drives sustained traffic at OpenAI-compatible
// inference servers, measures TTFT, inter-token latency, tokens/s and cost
// per request, exposes them on /metrics and writes reports. It also embeds a
// simulated inference server (`sim`).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"
)

// Exit statuses (documented in docs/loadgen.md and the help).
const (
	exitOK = 0
	// exitError: the command failed (an output could not be written, a
	// server could not be served); what was measured is still written
	// where it can be.
	exitError = 1
	// exitUsage: the command line, or a file or value it names, was
	// rejected before any request was sent.
	exitUsage = 2
	// exitAllFailed: run or sweep completed, but every measured request
	// failed (none completed), or the server answered no calibration
	// request in time and no run started.
	exitAllFailed = 3
	// exitInterrupted: run or sweep was interrupted (SIGINT, SIGTERM); the
	// reports cover what was measured until then.
	exitInterrupted = 4
	// exitSignalBase: a second SIGINT or SIGTERM, while the first one's
	// graceful stop was under way, ends the process at once with
	// exitSignalBase + the signal's number (130, 143), as a shell reports
	// a process a signal ended.
	exitSignalBase = 128
)

const exitStatusHelp = "Exit status: 0 success; 1 the command failed (e.g. an output could not be written); " +
	"2 bad command line or input, rejected before any request was sent; " +
	"3 run/sweep/search: every measured request failed, or the server answered no calibration request in time (no run started); 4 run/sweep/search: interrupted (Ctrl-C, SIGTERM), the reports cover what was measured; " +
	"130 or 143: a second Ctrl-C or SIGTERM ended the graceful stop at once."

// command is one kingpin subcommand and the function that runs it once its
// flags are parsed. ctx is cancelled on SIGINT/SIGTERM. status, when set,
// is the exit status of a run that returned no error (exitAllFailed,
// exitInterrupted).
type command struct {
	clause *kingpin.CmdClause
	run    func(ctx context.Context, logger *slog.Logger) error
	status func() int
}

// usageError marks an error found before any work was done: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
	os.Exit(runMain(os.Args[1:]))
}

func runMain(args []string) int {
	app, commands, promslogConfig := newApp()
	selected, err := app.Parse(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpulens-loadgen: %v\n", err)
		return exitUsage
	}
	logger := promslog.New(promslogConfig)

	ctx, stop := stopOnSignal(context.Background(), logger, func(code int) { os.Exit(code) })
	defer stop()
	for _, c := range commands {
		if c.clause.FullCommand() == selected {
			return exitStatus(c, c.run(ctx, logger), logger)
		}
	}
	fmt.Fprintf(os.Stderr, "gpulens-loadgen: unknown command %q\n", selected)
	return exitUsage
}

// newApp declares the load generator's commands and flags.
func newApp() (*kingpin.Application, []command, *promslog.Config) {
	app := kingpin.New("gpulens-loadgen", "Load generator and simulated server for OpenAI-compatible inference endpoints. "+exitStatusHelp)
	promslogConfig := &promslog.Config{}
	flag.AddFlags(app, promslogConfig)
	app.Version(version.Print("gpulens-loadgen"))
	app.HelpFlag.Short('h')

	// Each subcommand registers itself here.
	commands := []command{
		runCommand(app),
		sweepCommand(app),
		searchCommand(app),
		simCommand(app),
		reportCommand(app),
		mergeCommand(app),
		costCommand(app, os.Stdout),
		compareCommand(app),
	}
	return app, commands, promslogConfig
}

// exitStatus maps what a command returned to the process's exit status.
func exitStatus(c command, err error, logger *slog.Logger) int {
	var ue usageError
	switch {
	case errors.As(err, &ue):
		logger.Error("invalid command line", "command", c.clause.FullCommand(), "err", err)
		return exitUsage
	case err != nil:
		logger.Error("command failed", "command", c.clause.FullCommand(), "err", err)
		return exitError
	case c.status != nil:
		return c.status()
	}
	return exitOK
}

// stopOnSignal returns a context cancelled by the first SIGINT or SIGTERM
// (the graceful stop: an interrupted run writes what it measured); a second
// one calls exit with exitSignalBase + its number at once, whatever the
// command is blocked on. stop ends the handling.
func stopOnSignal(parent context.Context, logger *slog.Logger, exit func(code int)) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		first := true
		for {
			select {
			case <-done:
				return
			case sig := <-sigs:
				if first {
					first = false
					logger.Warn("stopping: writing what was measured; send the signal again to exit at once", "signal", sig.String())
					cancel()
					continue
				}
				code := exitSignalBase + 2
				if s, ok := sig.(syscall.Signal); ok {
					code = exitSignalBase + int(s)
				}
				logger.Error("second signal: exiting at once, reports not written", "signal", sig.String(), "exit_status", code)
				exit(code)
				return
			}
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}
