package render

import (
	"fmt"
	"io"

	"github.com/gpulens/gpulens/loadgen/report"
)

// writeManifest prints a line of the manifest, when it says anything:
// what the server said it is and the settings hash.
func writeManifest(w io.Writer, d *report.Document) {
	if m := d.Metadata.Manifest; m != nil && (m.ServerVersion != "" || m.ModelRevision != "" || m.SettingsHash != "") {
		fmt.Fprintf(w, "server version %s, model revision %s, settings hash %s\n", orNone(m.ServerVersion), orNone(m.ModelRevision), orNone(m.SettingsHash))
	}
}

func orNone(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
