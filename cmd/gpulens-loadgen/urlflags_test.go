package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestURLFlagErrors: a malformed URL, a port out of range or a host that
// cannot exist, in any URL flag of run or sweep, is bad input: exit status
// 2 naming the flag, before any request (to the API, the exporter or the
// server's metrics).
func TestURLFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		flag, url, want string
	}{
		{"--target", "http://127.0.0.1:99999/v1", "port 99999 out of range 1-65535"},
		{"--target", "http://127.0.0.1:0/v1", "port 0 out of range"},
		{"--target", "http://127.0.0.1:/v1", "empty port"},
		{"--target", "http://127.0.0.1:8x/v1", `invalid port ":8x"`},
		{"--target", "http://300.1.1.1:8000/v1", `host "300.1.1.1": not an IPv4 address`},
		{"--target", "http://a..b:8000/v1", `host "a..b": empty label`},
		{"--target", "http://bad_host!/v1", "not allowed in a host name"},
		{"--target", "http://[::1:8000/v1", "missing ']' in host"},
		{"--target", "http:///v1", "no host"},
		{"--target", "127.0.0.1:8000/v1", "first path segment in URL cannot contain colon"},
		{"--target", "localhost:8000/v1", `scheme "localhost"`},
		{"--exporter.url", "http://127.0.0.1:99999/metrics", "port 99999 out of range"},
		{"--exporter.url", "http://exporter..local:9835/metrics", "empty label"},
		{"--exporter.url", "http://:9835/metrics", "empty host"},
		{"--server-metrics.url", "http://127.0.0.1:70000/metrics", "port 70000 out of range"},
		{"--server-metrics.url", "http://999.0.0.1/metrics", "not an IPv4 address"},
		{"--server-metrics.url", "https://[zz::1]/metrics", "invalid host"},
		{"--server-metrics.url", "http://[1::2::3]:9/metrics", "invalid host"},
	} {
		for _, sub := range []struct {
			name string
			cmd  func(*kingpin.Application) command
			args []string
		}{
			{"run", runCommand, []string{"run", "--concurrency", "1", "--requests", "2"}},
			{"sweep", sweepCommand, []string{"sweep", "--concurrency", "1,2", "--requests", "2"}},
		} {
			srv := &recordingServer{}
			good := srv.start(t)
			target := good
			args := append([]string(nil), sub.args...)
			// The other URLs point at the recording server, which must see
			// nothing.
			switch tc.flag {
			case "--target":
				target = tc.url
				args = append(args, "--exporter.url", strings.TrimSuffix(good, "/v1")+"/metrics",
					"--server-metrics.url", strings.TrimSuffix(good, "/v1")+"/metrics")
			default:
				args = append(args, tc.flag, tc.url)
			}
			c := parseRun(t, sub.cmd, target, args...)
			err := c.run(context.Background(), slog.New(slog.DiscardHandler))
			want := tc.flag + " " + `"` + tc.url + `"`
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %s %s: err = %v, want %q and %q", sub.name, tc.flag, tc.url, err, want, tc.want)
				continue
			}
			if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); got != exitUsage {
				t.Errorf("%s %s %s: exit status %d, want %d", sub.name, tc.flag, tc.url, got, exitUsage)
			}
			if n := srv.n.Load(); n != 0 {
				t.Errorf("%s %s %s: %d requests sent before the error", sub.name, tc.flag, tc.url, n)
			}
		}
	}
}
