package gpusim

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/gpulens/gpulens/internal/yamlerr"
	"go.yaml.in/yaml/v3"
)

// ParseError is one problem in a scenario file, located by line and field
// path ("my.yaml:12: devices[1].util.period: ...").
type ParseError = yamlerr.Error

// errList collects ParseErrors, resolving paths to lines.
type errList struct {
	source string
	lines  map[string]int
	errs   []error
}

func (l *errList) add(path, format string, args ...any) {
	if len(l.errs) >= maxErrors {
		return
	}
	l.errs = append(l.errs, &ParseError{Source: l.source, Line: l.lineOf(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (l *errList) addLine(line int, path, msg string) {
	if len(l.errs) >= maxErrors {
		return
	}
	l.errs = append(l.errs, &ParseError{Source: l.source, Line: line, Path: path, Msg: msg})
}

// lineOf finds the line of path, or of its nearest ancestor present in the file.
func (l *errList) lineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if n, ok := l.lines[p]; ok {
			return n
		}
	}
	return 0
}

func (l *errList) err() error { return errors.Join(l.errs...) }

func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

func joinPath(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

// indexLines records the line of every key and sequence item, by path, and
// the first path that starts on each line.
func indexLines(n *yaml.Node, path string, lines map[string]int, byLine map[int][]linePath) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexLines(c, path, lines, byLine)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			if _, ok := lines[p]; !ok {
				lines[p] = k.Line
			}
			byLine[k.Line] = append(byLine[k.Line], linePath{p, v.Value})
			indexLines(v, p, lines, byLine)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			byLine[c.Line] = append(byLine[c.Line], linePath{p, c.Value})
			indexLines(c, p, lines, byLine)
		}
	}
}

// checkKnownFields reports mapping keys that the target type does not have.
func checkKnownFields(n *yaml.Node, t reflect.Type, path string, l *errList) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			checkKnownFields(c, t, path, l)
		}
	case yaml.MappingNode:
		if t.Kind() != reflect.Struct {
			return // type mismatch: reported by the decoder
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		sort.Strings(names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				l.addLine(k.Line, p, fmt.Sprintf("unknown field %q (known fields: %s)", k.Value, strings.Join(names, ", ")))
				continue
			}
			checkKnownFields(v, ft, p, l)
		}
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice {
			return
		}
		for i, c := range n.Content {
			checkKnownFields(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), l)
		}
	}
}

var (
	valueRE = regexp.MustCompile("`([^`]*)`")
)

// linePath is a path that starts on a line, with its scalar value if any.
type linePath struct{ path, value string }

// pathForError picks the field a decoder message is about: the one on the
// line whose value the message quotes, else the deepest one on the line.
func pathForError(paths []linePath, msg string) string {
	if len(paths) == 0 {
		return ""
	}
	if m := valueRE.FindStringSubmatch(msg); m != nil {
		for _, p := range paths {
			if p.value == m[1] {
				return p.path
			}
		}
	}
	return paths[len(paths)-1].path
}
