package verify

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"time"
)

//go:embed page.html.tmpl
var pageTemplate string

// styleTemplate defines "style", the <style> element the report's and the
// comparison's pages share.
//
//go:embed style.html.tmpl
var styleTemplate string

var page = styledTemplate("page", pageTemplate, template.FuncMap{
	"upper": func(s Status) string { return label(s) },
})

// styledTemplate parses text with the shared style.
func styledTemplate(name, text string, funcs template.FuncMap) *template.Template {
	t := template.Must(template.New(name).Funcs(funcs).Parse(text))
	return template.Must(t.Parse(styleTemplate))
}

type kv struct{ K, V string }

type htmlDevice struct {
	D       Device
	Meta    []kv
	Figures []figureRow
}

type htmlView struct {
	Title, Started, Host string
	R                    *Report
	Devices              []htmlDevice
	Settings             []kv
}

// WriteHTML renders the report as one self-contained HTML page (inline CSS,
// no scripts, no external resources); all report text is escaped by
// html/template.
func WriteHTML(w io.Writer, r *Report) error {
	v := htmlView{Title: "GPU host acceptance report", R: r, Host: strings.TrimPrefix(hostLine(r), "Host: ")}
	if r.Simulated != nil {
		v.Title += " (simulated)"
	}
	if !r.Started.IsZero() {
		v.Started = r.Started.UTC().Format(time.RFC3339)
	}
	for _, d := range r.Devices {
		hd := htmlDevice{D: d, Figures: figureRows(d.Figures)}
		add := func(k, val string) {
			if val != "" {
				hd.Meta = append(hd.Meta, kv{k, val})
			}
		}
		add("Name", d.Name)
		add("UUID", d.UUID)
		add("PCI bus id", d.PCIBusID)
		if d.Spec != nil {
			s := d.Spec.Model + " (" + d.Spec.Key + ")"
			if d.Spec.From == "expect" {
				s += ", chosen by --expect.gpu"
			}
			if d.Spec.Estimated {
				s += "; expected probe figures are estimates"
			}
			add("Judged against", s)
		}
		if c := d.CUDA; c != nil {
			add("CUDA", fmt.Sprintf("ordinal %d, compute capability %s, %d SMs", c.Ordinal, c.ComputeCapability, c.SMs))
		}
		if n := d.NVML; n != nil {
			add("NVML GPU", fmt.Sprintf("index %d (matched by %s)", n.Index, d.MatchedBy))
			add("Virtualization", n.Virtualization)
			add("Compute mode", n.ComputeMode)
		}
		if m := d.MIG; m != nil {
			add("MIG instance", fmt.Sprintf("%s (GPU instance %d, compute instance %d)", orDefault(m.Profile, m.Name), m.GPUInstanceID, m.ComputeInstanceID))
		}
		add("Runs", fmt.Sprint(len(d.Runs)))
		v.Devices = append(v.Devices, hd)
	}
	s := r.Settings
	v.Settings = []kv{
		{"Repeat", fmt.Sprint(s.Repeat)},
		{"Interval", fmtDuration(s.Interval)},
		{"Probe GPU-time budget", fmtDuration(s.Probe.GPUTimeBudget)},
		{"Stolen-time window", fmtDuration(s.Probe.StolenWindow)},
		{"Probe memory cap", fmtGiB(float64(s.Probe.MaxMemoryBytes))},
		{"VRAM fill test", fmt.Sprint(s.Probe.Fill)},
		{"Strict", fmt.Sprint(s.Strict)},
	}
	e := s.Expect
	for _, x := range []kv{
		{"--expect.gpu", e.GPU},
		{"--expect.driver", e.Driver},
		{"--expect.cuda", e.CUDA},
	} {
		if x.V != "" {
			v.Settings = append(v.Settings, x)
		}
	}
	if e.VRAMBytes > 0 {
		v.Settings = append(v.Settings, kv{"--expect.vram", fmtGiB(float64(e.VRAMBytes))})
	}
	if e.PCIeGen > 0 {
		v.Settings = append(v.Settings, kv{"--expect.pcie", fmt.Sprintf("Gen%d x%d", e.PCIeGen, e.PCIeWidth)})
	}
	if e.Devices > 0 {
		v.Settings = append(v.Settings, kv{"--expect.devices", fmt.Sprint(e.Devices)})
	}
	if err := page.Execute(w, v); err != nil {
		return fmt.Errorf("rendering HTML report: %w", err)
	}
	return nil
}
