package render

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/report"
)

// manifestRows are the metadata rows of the manifest: what the server
// said it is, the host, the labels and the settings hash.
func manifestRows(m *report.Manifest) []kv {
	if m == nil {
		return nil
	}
	var out []kv
	add := func(k, v string) {
		if v != "" {
			out = append(out, kv{k, v})
		}
	}
	add("Server version", m.ServerVersion)
	add("Model revision", m.ModelRevision)
	for _, f := range m.Server {
		switch {
		case f.Status == 200 && len(f.Fields) > 0:
			keys := make([]string, 0, len(f.Fields))
			for k := range f.Fields {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for i, k := range keys {
				if i == 6 {
					parts = append(parts, fmt.Sprintf("… %d more in the JSON report", len(keys)-i))
					break
				}
				parts = append(parts, k+"="+f.Fields[k])
			}
			add("Server "+f.Endpoint, strings.Join(parts, ", "))
		case f.Error != "":
			add("Server "+f.Endpoint, f.Error)
		}
	}
	h := m.Host
	host := h.OS + "/" + h.Arch
	if h.Kernel != "" {
		host += ", kernel " + h.Kernel
	}
	if h.CPUs > 0 {
		host += ", " + strconv.Itoa(h.CPUs) + " CPUs"
	}
	if h.CPUModel != "" {
		host += " (" + h.CPUModel + ")"
	}
	if h.Hostname != "" {
		host += ", " + h.Hostname
	}
	if h.OS != "" {
		add("Load generator host", host)
	}
	keys := make([]string, 0, len(m.Labels))
	for k := range m.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, kv{"Label " + k, m.Labels[k]})
	}
	add("Settings hash", m.SettingsHash)
	return out
}
