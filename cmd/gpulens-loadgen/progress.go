package main

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// observer watches a campaign: the live metrics and the progress line.
type observer struct {
	m *Metrics
	p *progress
}

func (o observer) Started() {
	o.m.Started()
	o.p.Started()
}

func (o observer) Finished(r *report.Record, warm bool) {
	o.m.Finished(r, warm)
	o.p.Finished(r, warm)
}

func (o observer) RunStarted(name string) { o.p.begin(name) }
func (o observer) RunEnded(string)        { o.p.end() }

// progress prints a one-line status on stderr when enabled.
type progress struct {
	enabled      bool
	done, failed atomic.Int64
	inFlight     atomic.Int64
	stop         chan struct{}
	stopped      chan struct{}
	name         string
	started      time.Time
}

func newProgress(enabled bool) *progress { return &progress{enabled: enabled} }

func (p *progress) begin(name string) {
	if !p.enabled {
		return
	}
	p.name, p.started = name, time.Now()
	p.done.Store(0)
	p.failed.Store(0)
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				fmt.Fprint(os.Stderr, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "\r\033[K%s  %s  done %d  failed %d  in flight %d", p.name,
					time.Since(p.started).Truncate(time.Second), p.done.Load(), p.failed.Load(), p.inFlight.Load())
			}
		}
	}()
}

func (p *progress) end() {
	if p.enabled {
		close(p.stop)
		<-p.stopped
	}
}

func (p *progress) Started() { p.inFlight.Add(1) }

func (p *progress) Finished(r *report.Record, _ bool) {
	p.inFlight.Add(-1)
	if r.OK() {
		p.done.Add(1)
	} else if !r.Interrupted() {
		p.failed.Add(1)
	}
}
