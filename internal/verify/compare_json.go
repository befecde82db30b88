package verify

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// ReportTool is the "tool" field of every report gpulens-verify writes.
const ReportTool = "gpulens-verify"

// ReadReportFile reads a report for a comparison, refusing, with the file
// and the field named, anything gpulens-verify did not write: not JSON, no
// "tool" or another tool's (a comparison's included), no "schema_version"
// or another version than SchemaVersion, a field of the wrong type, or a
// figure whose median is not within its min–max.
func ReadReportFile(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%s: not a gpulens-verify JSON report: %v", path, err)
	}
	var tool string
	if raw, ok := head["tool"]; !ok {
		return nil, fmt.Errorf(`%s: not a gpulens-verify JSON report: it has no field "tool"`, path)
	} else if err := json.Unmarshal(raw, &tool); err != nil || tool != ReportTool {
		what := fmt.Sprintf("%q", tool)
		if err != nil {
			what = string(raw)
		}
		extra := ""
		if tool == CompareTool {
			extra = " (a comparison: compare the reports it was made from)"
		}
		return nil, fmt.Errorf(`%s: not a gpulens-verify JSON report: field "tool" is %s, not %q%s`, path, what, ReportTool, extra)
	}
	var version int
	if raw, ok := head["schema_version"]; !ok {
		return nil, fmt.Errorf(`%s: field "schema_version" is missing`, path)
	} else if err := json.Unmarshal(raw, &version); err != nil {
		return nil, fmt.Errorf(`%s: field "schema_version" is %s, not a number`, path, raw)
	}
	if version != SchemaVersion {
		return nil, fmt.Errorf(`%s: field "schema_version" is %d; this gpulens-verify reads version %d`, path, version, SchemaVersion)
	}
	var r Report
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	for i := range r.Devices {
		d := &r.Devices[i]
		for _, def := range compareFigures {
			st := def.get(d)
			if st == nil {
				continue
			}
			field := fmt.Sprintf("devices[%d] (%s), figures.%s", i, d.Label, def.ID)
			switch {
			case st.N < 1:
				return nil, fmt.Errorf(`%s: %s: field "n" is %d, not a number of runs`, path, field, st.N)
			case st.Min > st.Median || st.Median > st.Max:
				return nil, fmt.Errorf(`%s: %s: field "median" %g is not within "min" %g and "max" %g`, path, field, st.Median, st.Min, st.Max)
			}
		}
	}
	return &r, nil
}

// WriteCompareJSON writes a comparison as indented JSON.
func WriteCompareJSON(w io.Writer, c *Comparison) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(c); err != nil {
		return fmt.Errorf("encoding JSON comparison: %w", err)
	}
	return nil
}

// WriteCompareFile writes a rendering of c to path atomically, through
// WriteFile (whose report argument its render leaves alone).
func WriteCompareFile(path string, c *Comparison, render func(io.Writer, *Comparison) error) error {
	return WriteFile(path, nil, func(w io.Writer, _ *Report) error { return render(w, c) })
}
