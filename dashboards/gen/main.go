// Command gen writes gpulens's Grafana dashboards as JSON:
//
//	go run ./dashboards/gen -out dashboards
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpulens/gpulens/dashboards"
)

func main() {
	out := flag.String("out", "dashboards", "folder to write the dashboard JSON files to")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("-out %s: %w", out, err)
	}
	for _, b := range dashboards.All() {
		raw, err := dashboards.Render(b)
		if err != nil {
			return err
		}
		p := filepath.Join(out, b.File)
		if err := os.WriteFile(p, raw, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", p, err)
		}
	}
	return nil
}
