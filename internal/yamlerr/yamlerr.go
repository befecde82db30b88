// Package yamlerr is the line-numbered error of gpulens's YAML input files
// (the simulator's scenarios, the exporter's price file): one problem,
// located by file, line and field path, in the form editors jump to.
package yamlerr

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Error is one problem in a YAML file: "SOURCE:LINE: PATH: MESSAGE", the
// line left out when unknown (0) and the path when empty (a whole-file
// problem).
type Error struct {
	Source string
	Line   int    // 0 when unknown
	Path   string // the field, e.g. devices[1].util.period; empty for the whole file
	Msg    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Source)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

var lineRE = regexp.MustCompile(`line (\d+): `)

// SplitLine takes the line number out of a YAML decoder's message
// ("yaml: line 3: did not find expected key", or one entry of a
// *yaml.TypeError, "line 5: cannot unmarshal ..."): it returns 3 and "did
// not find expected key", without the "yaml: " prefix. line is 0 when the
// message names none.
func SplitLine(msg string) (line int, rest string) {
	msg = strings.TrimPrefix(msg, "yaml: ")
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, msg
	}
	line, _ = strconv.Atoi(m[1])
	return line, strings.Replace(msg, m[0], "", 1)
}
