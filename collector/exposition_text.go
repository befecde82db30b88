package collector

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The snapshot is written as text directly, without a registry: its
// metrics were checked when they were built (MustNewConstMetric), so the
// registry's consistency checks, hashing and copies, which cost most of a
// render, are skipped. The output is byte for byte what gathering the
// snapshot through a registry and encoding it with expfmt gives: families
// sorted by name, each family's metrics sorted by label values, merged with
// the families of the exporter's own registry (TestSnapshotTextMatchesExpfmt).

// familyMeta is what a registry would tell about a snapshot family; learnt
// once per Desc.
type familyMeta struct {
	name     string
	typ      dto.MetricType
	header   []byte // "# HELP …\n# TYPE …\n"
	omHeader []byte // the same in OpenMetrics
	// plain: the family and label names are valid legacy names and the type
	// is a counter or gauge, so writeFamily writes it; otherwise expfmt does.
	plain bool
	help  string
}

// maxLearntFamilies bounds the Descs remembered by snapshotText.
const maxLearntFamilies = 4096

// snapFamily is one family of the snapshot being rendered.
type snapFamily struct {
	meta    *familyMeta
	metrics []*dto.Metric
}

// snapshotText renders snapshots; it is used under Exposition.renderMu.
type snapshotText struct {
	metas    map[*prometheus.Desc]*familyMeta
	index    map[*prometheus.Desc]int
	families []snapFamily
	merged   []snapFamily // families with the Descs of one name merged
	dtos     []dto.Metric
	num      []byte
	all      []prometheus.Metric // the snapshot's and the Registry's metrics
}

// learn gathers one metric of an unknown Desc through a registry to find
// its family's name, help and type.
func (t *snapshotText) learn(m prometheus.Metric) (*familyMeta, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(oneMetric{m}); err != nil {
		return nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	if len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		return nil, fmt.Errorf("metric %s gathered as %d families", m.Desc(), len(mfs))
	}
	mf := mfs[0]
	meta := &familyMeta{name: mf.GetName(), typ: mf.GetType(), help: mf.GetHelp()}
	meta.plain = (meta.typ == dto.MetricType_GAUGE || meta.typ == dto.MetricType_COUNTER) &&
		model.LegacyValidation.IsValidMetricName(meta.name)
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		meta.plain = meta.plain && model.LegacyValidation.IsValidLabelName(lp.GetName())
	}
	var h bytes.Buffer
	if mf.Help != nil {
		h.WriteString("# HELP " + meta.name + " ")
		h.WriteString(strings.NewReplacer("\\", `\\`, "\n", `\n`).Replace(meta.help))
		h.WriteByte('\n')
	}
	h.WriteString("# TYPE " + meta.name + " " + strings.ToLower(meta.typ.String()) + "\n")
	meta.header = h.Bytes()
	// OpenMetrics, as expfmt.MetricFamilyToOpenMetrics writes it: a
	// counter's family is named without _total (a counter without it is
	// "unknown"), help escapes quotes too.
	om, typ := meta.name, strings.ToLower(meta.typ.String())
	if meta.typ == dto.MetricType_COUNTER {
		if c, ok := strings.CutSuffix(om, "_total"); ok {
			om = c
		} else {
			typ = "unknown"
		}
	}
	var oh bytes.Buffer
	if mf.Help != nil {
		oh.WriteString("# HELP " + om + " ")
		oh.WriteString(strings.NewReplacer("\\", `\\`, "\n", `\n`, `"`, `\"`).Replace(meta.help))
		oh.WriteByte('\n')
	}
	oh.WriteString("# TYPE " + om + " " + typ + "\n")
	meta.omHeader = oh.Bytes()
	return meta, nil
}

// oneMetric is an unchecked collector of one metric.
type oneMetric struct{ m prometheus.Metric }

func (oneMetric) Describe(chan<- *prometheus.Desc)      {}
func (c oneMetric) Collect(ch chan<- prometheus.Metric) { ch <- c.m }

// group sorts the snapshot's metrics into families. It drops a metric it
// cannot write or whose labels repeat another's in its family, as a
// registry does, and reports them in warn; err means two Descs share a
// family name (the caller falls back to a registry gather, which merges
// them).
func (t *snapshotText) group(ms []prometheus.Metric) (fams []snapFamily, warn, err error) {
	if t.metas == nil {
		t.metas = map[*prometheus.Desc]*familyMeta{}
		t.index = map[*prometheus.Desc]int{}
	}
	clear(t.index)
	for i := range t.families {
		t.families[i] = snapFamily{metrics: t.families[i].metrics[:0]}
	}
	t.families = t.families[:0]
	if cap(t.dtos) < len(ms) {
		t.dtos = make([]dto.Metric, len(ms)+len(ms)/4)
	}
	dtos := t.dtos[:len(ms)]
	var errs []error
	for i, m := range ms {
		d := m.Desc()
		fi, ok := t.index[d]
		if !ok {
			meta := t.metas[d]
			if meta == nil {
				if len(t.metas) >= maxLearntFamilies {
					clear(t.metas) // Descs made anew on every cycle: do not keep them all
				}
				var err error
				if meta, err = t.learn(m); err != nil {
					errs = append(errs, err)
					continue
				}
				t.metas[d] = meta
			}
			fi = len(t.families)
			t.index[d] = fi
			if fi < cap(t.families) {
				t.families = t.families[:fi+1]
				t.families[fi].meta = meta
			} else {
				t.families = append(t.families, snapFamily{meta: meta})
			}
		}
		dm := &dtos[i]
		dm.Reset()
		if err := m.Write(dm); err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", d, err))
			continue
		}
		t.families[fi].metrics = append(t.families[fi].metrics, dm)
	}
	slices.SortFunc(t.families, func(a, b snapFamily) int { return strings.Compare(a.meta.name, b.meta.name) })
	// Descs of one family (the same name, help and type with other label
	// names) are merged, as a registry merges them; the merged family gets
	// its own slice, so that the families' slices stay apart for reuse.
	fams = t.merged[:0]
	for _, f := range t.families {
		if n := len(fams); n > 0 && fams[n-1].meta.name == f.meta.name {
			prev := &fams[n-1]
			if prev.meta.typ != f.meta.typ || prev.meta.help != f.meta.help || prev.meta.plain != f.meta.plain {
				return nil, nil, errFamilyInBoth{f.meta.name}
			}
			prev.metrics = append(slices.Clip(prev.metrics), f.metrics...)
			continue
		}
		fams = append(fams, f)
	}
	t.merged = fams
	for i := range fams {
		f := &fams[i]
		slices.SortFunc(f.metrics, compareLabels)
		kept := f.metrics[:0]
		for j, m := range f.metrics {
			if j > 0 && sameLabels(f.metrics[j-1], m) {
				errs = append(errs, fmt.Errorf("metric %s%v collected twice", f.meta.name, m.GetLabel()))
				continue
			}
			kept = append(kept, m)
		}
		f.metrics = kept
	}
	return fams, joinErrors(errs), nil
}

// gather groups the snapshot's metrics and the exporter's own into
// families. The collectors of a Registry are collected here, on one
// goroutine, and grouped like the snapshot; another Gatherer is gathered.
// The families are valid until the next gather.
func (t *snapshotText) gather(ms []prometheus.Metric, live prometheus.Gatherer) (fams []snapFamily, mfs []*dto.MetricFamily, warn, err error) {
	if r, ok := live.(*Registry); ok {
		t.all = append(t.all[:0], ms...)
		t.all = r.collect(t.all)
		fams, warn, err := t.group(t.all)
		clear(t.all) // drop the references until the next render
		return fams, nil, warn, err
	}
	fams, warn, err = t.group(ms)
	if err != nil {
		return nil, nil, warn, err
	}
	mfs, gatherErr := live.Gather()
	if gatherErr != nil {
		warn = joinErrors(append([]error{gatherErr}, nonNil(warn)...))
	}
	return fams, mfs, warn, nil
}

// compareLabels orders metrics as a registry does: by label values in label
// name order, fewer labels first.
func compareLabels(a, b *dto.Metric) int {
	la, lb := a.GetLabel(), b.GetLabel()
	if len(la) != len(lb) {
		return len(la) - len(lb)
	}
	for i := range la {
		if c := strings.Compare(la[i].GetValue(), lb[i].GetValue()); c != 0 {
			return c
		}
	}
	return 0
}

// sameLabels reports whether two metrics have the same label names and
// values (a registry's duplicate check).
func sameLabels(a, b *dto.Metric) bool {
	la, lb := a.GetLabel(), b.GetLabel()
	if len(la) != len(lb) {
		return false
	}
	for i := range la {
		if la[i].GetName() != lb[i].GetName() || la[i].GetValue() != lb[i].GetValue() {
			return false
		}
	}
	return true
}

func nonNil(err error) []error {
	if err == nil {
		return nil
	}
	return []error{err}
}

func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w (and %d more errors)", errs[0], len(errs)-1)
}

// writeFamily writes a plain family as expfmt.MetricFamilyToText does or,
// with om, as expfmt.MetricFamilyToOpenMetrics does (the same samples with
// OpenMetrics numbers, 1.0 and 0.5, and timestamps in seconds).
func (t *snapshotText) writeFamily(buf *bytes.Buffer, f snapFamily, om bool) {
	if om {
		buf.Write(f.meta.omHeader)
	} else {
		buf.Write(f.meta.header)
	}
	for _, m := range f.metrics {
		t.writeFloat(buf, writeSeriesName(buf, f, m), om)
		if m.TimestampMs != nil {
			buf.WriteByte(' ')
			if om {
				t.writeFloat(buf, float64(m.GetTimestampMs())/1000, true)
			} else {
				t.num = strconv.AppendInt(t.num[:0], m.GetTimestampMs(), 10)
				buf.Write(t.num)
			}
		}
		buf.WriteByte('\n')
	}
}

// writeSeriesName writes a plain family's sample up to its value (the
// name, the labels and a space), the same in text and OpenMetrics, and
// returns the value.
func writeSeriesName(buf *bytes.Buffer, f snapFamily, m *dto.Metric) float64 {
	buf.WriteString(f.meta.name)
	for i, lp := range m.GetLabel() {
		if i == 0 {
			buf.WriteByte('{')
		} else {
			buf.WriteByte(',')
		}
		buf.WriteString(lp.GetName())
		buf.WriteString(`="`)
		writeLabelValue(buf, lp.GetValue())
		buf.WriteByte('"')
	}
	if len(m.GetLabel()) > 0 {
		buf.WriteByte('}')
	}
	buf.WriteByte(' ')
	if f.meta.typ == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// writeLabelValue escapes \, newline and " as the text format requires.
func writeLabelValue(buf *bytes.Buffer, v string) {
	i := 0
	for i < len(v) && v[i] != '\\' && v[i] != '\n' && v[i] != '"' {
		i++
	}
	buf.WriteString(v[:i])
	for ; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			buf.WriteString(`\\`)
		case '\n':
			buf.WriteString(`\n`)
		case '"':
			buf.WriteString(`\"`)
		default:
			buf.WriteByte(c)
		}
	}
}

// writeFloat formats a number as expfmt's text encoder does or, with om,
// as its OpenMetrics encoder does (a ".0" on integral values: 1.0, 0.0).
func (t *snapshotText) writeFloat(buf *bytes.Buffer, f float64, om bool) {
	if f == 0 {
		f = 0 // -0 reads 0
	}
	t.num = strconv.AppendFloat(t.num[:0], f, 'g', -1, 64)
	if om && !math.IsNaN(f) && !math.IsInf(f, 0) && !bytes.ContainsAny(t.num, "e.") {
		t.num = append(t.num, '.', '0')
	}
	buf.Write(t.num)
}

// write writes the snapshot's families and the registry's, merged in name
// order, in the text format or, with om, in OpenMetrics ("# EOF" included).
func (t *snapshotText) write(buf *bytes.Buffer, snap []snapFamily, live []*dto.MetricFamily, om bool) error {
	encode := func(mf *dto.MetricFamily) error {
		if om {
			_, err := expfmt.MetricFamilyToOpenMetrics(buf, mf)
			return err
		}
		_, err := expfmt.MetricFamilyToText(buf, mf)
		return err
	}
	i, j := 0, 0
	for i < len(snap) || j < len(live) {
		switch {
		case j == len(live) || (i < len(snap) && snap[i].meta.name < live[j].GetName()):
			f := snap[i]
			i++
			if len(f.metrics) == 0 {
				continue
			}
			if f.meta.plain {
				t.writeFamily(buf, f, om)
				continue
			}
			if err := encode(&dto.MetricFamily{Name: &f.meta.name, Help: &f.meta.help, Type: &f.meta.typ, Metric: f.metrics}); err != nil {
				return fmt.Errorf("encoding %s: %w", f.meta.name, err)
			}
		case i == len(snap) || live[j].GetName() < snap[i].meta.name:
			if err := encode(live[j]); err != nil {
				return fmt.Errorf("encoding %s: %w", live[j].GetName(), err)
			}
			j++
		default:
			return errFamilyInBoth{live[j].GetName()}
		}
	}
	if om {
		_, err := expfmt.FinalizeOpenMetrics(buf)
		return err
	}
	return nil
}

// errFamilyInBoth: one family name in two places (two Descs of the
// snapshot, or the snapshot and the registry).
type errFamilyInBoth struct{ name string }

func (e errFamilyInBoth) Error() string {
	return "metric family " + e.name + " is gathered from two sources"
}
