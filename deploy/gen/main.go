// Command gen writes the generated deploy files (PrometheusRule and Grafana
// dashboard ConfigMaps of the kustomize base, the Helm chart's copies of the
// rules and dashboards) from alerts/ and dashboards/:
//
//	go run ./deploy/gen
package main

import (
	"flag"
	"fmt"
	"os"
	"sort"

	"github.com/gpulens/gpulens/deploy"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	files, err := deploy.Generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploy/gen:", err)
		os.Exit(1)
	}
	if err := deploy.WriteGenerated(*root, files); err != nil {
		fmt.Fprintln(os.Stderr, "deploy/gen:", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println("wrote", n)
	}
}
