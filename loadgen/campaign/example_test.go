package campaign_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// A closed-loop sweep of 1, 2 and 4 users, three repeats each, one
// minute per run, from Go: what `gpulens-loadgen sweep --concurrency 1,2,4
// --repeats 3 --duration 1m` does, without the live metrics and the files.
func Example() {
	in, _ := workload.ParseLength("input tokens", "fixed:256")
	out, _ := workload.ParseLength("output tokens", "fixed:128")
	c, err := campaign.New(
		campaign.Plan{Command: "sweep", Mode: report.ModeClosed, Levels: []float64{1, 2, 4}, Repeats: 3},
		campaign.Options{
			Client:   client.Config{BaseURL: "http://127.0.0.1:8000/v1", Endpoint: client.EndpointChat, Model: "my-model", Timeout: time.Minute},
			Workload: workload.Config{Seed: 1, Input: in, Output: out},
			Prompts:  report.PromptsDistinct,
			Run:      runner.Config{Duration: time.Minute},
			Prices:   report.CostSettings{GPUHourlyUSD: 2.5, GPUs: 1},
		})
	if err != nil {
		log.Fatal(err) // e.g. "Concurrency must be at least 1, got 0"
	}
	res, err := c.Run(context.Background(), nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res.Document.Runs {
		fmt.Println(r.Name, r.Summary.TTFT.P99, r.Summary.GoodputPerSecond)
	}
	_ = res.Document.Write("sweep.json") // the JSON report
}

// The same sweep from settings as a person gives them (what the command
// line fills): Settings.Options parses, reads and checks them, SweepPlan
// makes the plan; an error names the setting ("InputTokens \"zipf:3\":
// unknown distribution ...").
func ExampleSettings() {
	s := campaign.DefaultSettings()
	s.Target, s.Model, s.Duration, s.Timeout = "http://127.0.0.1:8000/v1", "my-model", time.Minute, time.Minute
	s.GPUHourlyUSD = 2.5
	opt, err := s.Options()
	if err != nil {
		log.Fatal(err)
	}
	plan, err := campaign.SweepPlan("1,2,4", "", 3, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := campaign.New(plan, opt)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(plan.Mode, plan.Levels, opt.Workload.Input, opt.Run.GracePeriod)
	_ = c // c.Run(ctx, nil) runs it, as in the package example
	// Output: closed [1 2 4] fixed:256 30s
}
