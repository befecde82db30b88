// Package testenv runs gpulens programs for tests: it finds or builds a
// program, starts it (a built binary in its own process group, or a run
// function in-process), collects its log, waits for the address it listens
// on, scrapes it and stops it.
//
// Every program listens on port 0 in tests and logs the address it got; the
// log line is the only way to learn it. ListenAddress knows the lines of
// gpulens's programs and of Prometheus.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Log is a program's output, safe to write from the program and read from
// the test at the same time.
type Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Tail returns at most the last n bytes written, marked "..." when cut.
func (l *Log) Tail(n int) string {
	s := l.String()
	if len(s) <= n {
		return s
	}
	return "...\n" + s[len(s)-n:]
}

// listenLine matches the line that names the address a program listens on:
// "Listening on" (exporter-toolkit: gpulens-exporter, gpulens-loadgen run,
// Prometheus, which adds component=web before the address) and `gpulens-
// loadgen sim`'s own line. Prometheus's earlier "Start listening for
// connections" line carries the configured address (port 0), not the real
// one, and does not match.
var listenLine = regexp.MustCompile(`msg="(?:Listening on|simulated inference server listening)"(?: [a-z_.]+=(?:"[^"]*"|[^\s"]+))*? address=([^\s"]+)`)

// ListenAddress returns the first address a program's log says it listens
// on (host:port, with the real port when it was asked for port 0).
func ListenAddress(log string) (string, bool) {
	for _, m := range listenLine.FindAllStringSubmatch(log, -1) {
		if !strings.HasSuffix(m[1], ":0") {
			return m[1], true
		}
	}
	return "", false
}

// Formats a scrape can ask for: the text format, or the protobuf format
// Prometheus asks for when it scrapes native histograms (only that format
// carries them).
const (
	AcceptText     = "text/plain;version=0.0.4"
	AcceptProtobuf = "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"
)

// Scrape GETs url within ctx, asking for accept (none when empty), and
// returns the body of a 200 answer.
func Scrape(ctx context.Context, url, accept string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	return body, nil
}

// Poll calls f every interval until it returns true (true) or ctx ends
// (false). f runs at once, then after each interval.
func Poll(ctx context.Context, interval time.Duration, f func() bool) bool {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if f() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// Eventually polls f every interval (see Poll) until it reports done, and
// fails t (Fatalf) when ctx ends first, naming what was awaited, how long,
// why the wait ended and what f saw last. f returns whether the condition
// holds and a short description of what it saw. Call it from the test's
// own goroutine (it may call Fatalf).
func Eventually(ctx context.Context, t testing.TB, interval time.Duration, what string, f func() (done bool, seen string)) {
	t.Helper()
	start := time.Now()
	seen := "nothing: the condition was never checked"
	if Poll(ctx, interval, func() bool {
		var ok bool
		ok, seen = f()
		return ok
	}) {
		return
	}
	t.Fatalf("waited %s for %s (%v); last seen: %s", time.Since(start).Round(time.Millisecond), what, context.Cause(ctx), seen)
}
