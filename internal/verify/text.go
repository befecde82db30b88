package verify

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpulens/gpulens/internal/cudaver"
)

// figureRow is one measurement as rendered.
type figureRow struct {
	Name                 string
	Median, Min, Max, CV string
	N                    int
}

// figureRows lists the measured figures in report order.
func figureRows(f Figures) []figureRow {
	var rows []figureRow
	add := func(name string, st *Stat, unit func(float64) string) {
		if st == nil {
			return
		}
		rows = append(rows, figureRow{Name: name, Median: unit(st.Median), Min: unit(st.Min), Max: unit(st.Max), CV: fmtPct(st.CV), N: st.N})
	}
	gib := func(v float64) string { return fmtGiB(v) }
	pct := func(v float64) string { return fmtPct(v) }
	add("Memory total", f.MemoryTotalBytes, gib)
	add("Memory free to a new context", f.MemoryFreeBytes, gib)
	add("Memory allocated (fill test)", f.MemoryUsableBytes, gib)
	add("Host to device", f.H2DBytesPerSecond, fmtRate)
	add("Device to host", f.D2HBytesPerSecond, fmtRate)
	add("Device memory (copy)", f.DeviceCopyBytesPerSecond, fmtRate)
	add("FP32 (FMA)", f.FP32FLOPS, fmtFLOPS)
	add("FP16 tensor (mma.sync)", f.FP16TensorFLOPS, fmtFLOPS)
	add("BF16 tensor (mma.sync)", f.BF16TensorFLOPS, fmtFLOPS)
	add("Launch latency", f.LaunchLatencySeconds, fmtSeconds)
	add("Launch latency p99", f.LaunchLatencyP99Seconds, fmtSeconds)
	add("Stolen time", f.StolenRatio, pct)
	add("Stolen time, worst block", f.StolenMaxRatio, pct)
	add("Stolen gap median", f.StolenGapMedianSeconds, fmtSeconds)
	add("Stolen gap p90", f.StolenGapP90Seconds, fmtSeconds)
	add("Stolen gap max", f.StolenGapMaxSeconds, fmtSeconds)
	return rows
}

func label(s Status) string { return strings.ToUpper(string(s)) }

// WriteText renders the report for a terminal: per device a verdict line
// per buyer question, the measurements and every check; then the host and
// the overall verdict.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	b.WriteString(headline(r) + "\n")
	b.WriteString(hostLine(r) + "\n")
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	for _, d := range r.Devices {
		b.WriteString("\n" + deviceHeading(d) + "\n")
		for _, a := range d.Answers {
			fmt.Fprintf(&b, "  %-4s  %-44s %s\n", label(a.Status), a.Question, a.Answer)
		}
		if rows := figureRows(d.Figures); len(rows) > 0 {
			b.WriteString("  Measurements: median, min–max, coefficient of variation over the runs\n")
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			for _, row := range rows {
				fmt.Fprintf(tw, "    %s\t%s\t%s–%s\tCV %s\t(%d)\n", row.Name, row.Median, row.Min, row.Max, row.CV, row.N)
			}
			tw.Flush()
		}
		b.WriteString("  Checks\n")
		for _, c := range d.Checks {
			fmt.Fprintf(&b, "    %-4s  %s: %s\n", label(c.Status), c.Title, c.Reason)
		}
	}
	b.WriteString("\nHost\n")
	for _, a := range r.Answers {
		fmt.Fprintf(&b, "  %-4s  %-44s %s\n", label(a.Status), a.Question, a.Answer)
	}
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "    %-4s  %s: %s\n", label(c.Status), c.Title, c.Reason)
	}
	b.WriteString("\n" + verdictLine(r) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func headline(r *Report) string {
	s := r.Tool
	if r.Version != "" {
		s += " " + r.Version
	}
	s += ": host acceptance report"
	if sim := r.Simulated; sim != nil {
		s += fmt.Sprintf(" — SIMULATED GPUs (scenario %s, seed %d)", sim.Scenario, sim.Seed)
	}
	return s
}

func hostLine(r *Report) string {
	var parts []string
	if n := r.Host.NVML; n != nil {
		if n.DriverVersion != "" {
			parts = append(parts, "driver "+n.DriverVersion)
		}
		parts = append(parts, fmt.Sprintf("NVML lists %d GPU(s)", n.DeviceCount))
	} else {
		parts = append(parts, "NVML: "+r.Host.NVMLError)
	}
	if v, _ := cudaDriverVersion(r.Host); v > 0 {
		parts = append(parts, "CUDA "+cudaver.Format(v))
	}
	if r.Host.CUDAError == "" {
		parts = append(parts, fmt.Sprintf("CUDA sees %d device(s)", len(r.Host.CUDADevices)))
	} else {
		parts = append(parts, "CUDA: "+r.Host.CUDAError)
	}
	if r.Settings.Interval > 0 {
		parts = append(parts, fmt.Sprintf("%d run(s) per device, %s apart", r.Settings.Repeat, fmtDuration(r.Settings.Interval)))
	} else {
		parts = append(parts, fmt.Sprintf("%d run(s) per device, back to back", r.Settings.Repeat))
	}
	return "Host: " + strings.Join(parts, " · ")
}

func deviceHeading(d Device) string {
	parts := []string{d.Label, d.Name}
	if d.Spec != nil {
		s := "judged as " + d.Spec.Model
		if d.Spec.From == "expect" {
			s += " (--expect.gpu)"
		}
		parts = append(parts, s)
	}
	if d.UUID != "" {
		parts = append(parts, d.UUID)
	}
	if d.PCIBusID != "" {
		parts = append(parts, d.PCIBusID)
	}
	return fmt.Sprintf("%s — %s", label(d.Verdict), strings.Join(parts, " · "))
}

func verdictLine(r *Report) string {
	s := r.Summary
	line := fmt.Sprintf("Verdict: %s — %d pass, %d warn, %d fail (exit %d)", label(s.Verdict), s.Pass, s.Warn, s.Fail, s.ExitCode)
	if r.Settings.Strict && s.Warn > 0 && s.Fail == 0 {
		line += "; --strict makes warnings fail"
	}
	return line
}
