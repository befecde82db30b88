package collector

import (
	"bytes"
	"math"
	"math/bits"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/encoding/protodelim"
)

// The delimited protobuf format written directly, as the text format is:
// a plain family (gauge or counter) whose metrics hold only labels, a value
// and a timestamp is encoded by hand, byte for byte what protodelim gives
// for the gathered family (TestSnapshotTextMatchesExpfmt); anything else
// goes through protodelim.

// Field tags of io.prometheus.client (metrics.proto): field number << 3 |
// wire type (0 varint, 1 fixed64, 2 length-delimited).
const (
	tagFamilyName   = 1<<3 | 2
	tagFamilyHelp   = 2<<3 | 2
	tagFamilyType   = 3<<3 | 0
	tagFamilyMetric = 4<<3 | 2
	tagMetricLabel  = 1<<3 | 2
	tagMetricGauge  = 2<<3 | 2
	tagMetricCount  = 3<<3 | 2
	tagMetricTime   = 6<<3 | 0
	tagLabelName    = 1<<3 | 2
	tagLabelValue   = 2<<3 | 2
	tagValue        = 1<<3 | 1
)

func varintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func stringFieldLen(s string) int { return 1 + varintLen(uint64(len(s))) + len(s) }

// simpleMetric reports whether m holds only what writeFamilyProto encodes.
func simpleMetric(m *dto.Metric, typ dto.MetricType) bool {
	if m.Summary != nil || m.Untyped != nil || m.Histogram != nil {
		return false
	}
	for _, lp := range m.Label {
		if lp.Name == nil || lp.Value == nil {
			return false
		}
	}
	switch typ {
	case dto.MetricType_GAUGE:
		return m.Counter == nil && m.Gauge != nil && m.Gauge.Value != nil
	case dto.MetricType_COUNTER:
		c := m.Counter
		return m.Gauge == nil && c != nil && c.Value != nil && c.Exemplar == nil && c.CreatedTimestamp == nil
	}
	return false
}

func labelPairLen(lp *dto.LabelPair) int {
	return stringFieldLen(lp.GetName()) + stringFieldLen(lp.GetValue())
}

// metricLen is the encoded size of a simple metric.
func metricLen(m *dto.Metric) int {
	n := 0
	for _, lp := range m.Label {
		l := labelPairLen(lp)
		n += 1 + varintLen(uint64(l)) + l
	}
	n += 1 + 1 + 9 // gauge or counter: tag, length 9, value
	if m.TimestampMs != nil {
		n += 1 + varintLen(uint64(*m.TimestampMs))
	}
	return n
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendString(b []byte, tag byte, s string) []byte {
	b = append(b, tag)
	b = appendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// writeFamilyProto writes a family, length-delimited, as protodelim.MarshalTo
// does: by hand when every metric is simple, else through protodelim.
func (t *snapshotText) writeFamilyProto(buf *bytes.Buffer, mf *dto.MetricFamily) error {
	typ := mf.GetType()
	simple := mf.Name != nil && mf.Help != nil && mf.Type != nil && mf.Unit == nil
	for _, m := range mf.Metric {
		simple = simple && simpleMetric(m, typ)
	}
	if !simple {
		_, err := protodelim.MarshalTo(buf, mf)
		return err
	}
	size := stringFieldLen(mf.GetName()) + stringFieldLen(mf.GetHelp()) + 1 + varintLen(uint64(typ))
	for _, m := range mf.Metric {
		l := metricLen(m)
		size += 1 + varintLen(uint64(l)) + l
	}
	b := t.num[:0]
	b = appendVarint(b, uint64(size))
	b = appendString(b, tagFamilyName, mf.GetName())
	b = appendString(b, tagFamilyHelp, mf.GetHelp())
	b = append(b, tagFamilyType)
	b = appendVarint(b, uint64(typ))
	for _, m := range mf.Metric {
		b = append(b, tagFamilyMetric)
		b = appendVarint(b, uint64(metricLen(m)))
		for _, lp := range m.Label {
			b = append(b, tagMetricLabel)
			b = appendVarint(b, uint64(labelPairLen(lp)))
			b = appendString(b, tagLabelName, lp.GetName())
			b = appendString(b, tagLabelValue, lp.GetValue())
		}
		var v float64
		if typ == dto.MetricType_GAUGE {
			b = append(b, tagMetricGauge, 9, tagValue)
			v = m.Gauge.GetValue()
		} else {
			b = append(b, tagMetricCount, 9, tagValue)
			v = m.Counter.GetValue()
		}
		u := math.Float64bits(v)
		b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24), byte(u>>32), byte(u>>40), byte(u>>48), byte(u>>56))
		if m.TimestampMs != nil {
			b = append(b, tagMetricTime)
			b = appendVarint(b, uint64(*m.TimestampMs))
		}
		if len(b) > 1<<16 {
			buf.Write(b)
			b = b[:0]
		}
	}
	buf.Write(b)
	t.num = b[:0]
	return nil
}
