// Package promtext reads the Prometheus text exposition format, the one
// way every gpulens program does: the load generator reading the
// exporter's metrics (loadgen/observe's Poller) and the inference
// server's (loadgen/observe's Recorder), and the simulated server reading the
// exporter's (internal/sim/simserver). Parsing is client_golang's
// (prometheus/common/expfmt); what this package adds is the one rule for
// a sample's value: NaN and ±Inf are no reading, never 0.
package promtext

import (
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are the metric families of one exposition, by name.
type Families = map[string]*dto.MetricFamily

// Parse reads one exposition in the text format (UTF-8 names allowed);
// its error is expfmt's ("text format parsing error in line 3: ..."), for
// the caller to say whose metrics it read.
func Parse(r io.Reader) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Labels are a sample's labels by name.
func Labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, lp := range m.GetLabel() {
		l[lp.GetName()] = lp.GetValue()
	}
	return l
}

// Value is a gauge's, counter's or untyped sample's value; ok is false when
// it has none (a histogram or summary) or it is NaN or ±Inf: an exporter
// writes NaN for a reading it does not have, and no reading is not 0.
func Value(m *dto.Metric) (v float64, ok bool) {
	switch {
	case m.GetGauge() != nil:
		v = m.GetGauge().GetValue()
	case m.GetCounter() != nil:
		v = m.GetCounter().GetValue()
	case m.GetUntyped() != nil:
		v = m.GetUntyped().GetValue()
	default:
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
