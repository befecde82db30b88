package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// panelQuery is one target of a dashboard panel, as Grafana sends it on
// the dashboard's default view: every variable All.
type panelQuery struct {
	Board   string // file name without .json
	PanelID int
	Title   string
	RefID   string
	Expr    string // as written, variables unsubstituted
	Instant bool
	Width   int // grid columns of 24
}

// Key names the query in tables: board, panel title and target.
func (q panelQuery) Key() string {
	return fmt.Sprintf("%s: %s (%s)", q.Board, q.Title, q.RefID)
}

// loadPanels reads every target of the named dashboards' JSON and each
// dashboard's default time range.
func loadPanels(dir string, boards []string) ([]panelQuery, map[string]time.Duration, error) {
	var out []panelQuery
	ranges := map[string]time.Duration{}
	for _, b := range boards {
		path := filepath.Join(dir, b+".json")
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, err
		}
		var d struct {
			Time struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"time"`
			Panels []struct {
				ID      int    `json:"id"`
				Type    string `json:"type"`
				Title   string `json:"title"`
				GridPos struct {
					W int `json:"w"`
				} `json:"gridPos"`
				Targets []struct {
					Expr    string `json:"expr"`
					RefID   string `json:"refId"`
					Instant bool   `json:"instant"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		r, err := defaultRange(d.Time.From, d.Time.To)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: time: %w", path, err)
		}
		ranges[b] = r
		for _, p := range d.Panels {
			for _, t := range p.Targets {
				if t.Expr == "" {
					continue
				}
				out = append(out, panelQuery{Board: b, PanelID: p.ID, Title: p.Title, RefID: t.RefID, Expr: t.Expr, Instant: t.Instant, Width: p.GridPos.W})
			}
		}
	}
	return out, ranges, nil
}

// defaultRange turns a dashboard's "now-3h" .. "now" into 3h.
func defaultRange(from, to string) (time.Duration, error) {
	if to != "now" {
		return 0, fmt.Errorf("to %q is not now", to)
	}
	rest, ok := strings.CutPrefix(from, "now-")
	if !ok {
		return 0, fmt.Errorf("from %q is not now-DURATION", from)
	}
	if d, ok := strings.CutSuffix(rest, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil {
			return 0, fmt.Errorf("from %q: %w", from, err)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(rest)
}

// dashboardWidthPx is the screen width the step is computed for: Grafana
// asks for about one point per pixel of the panel.
const dashboardWidthPx = 1920

// step is Grafana's $__interval for a panel w grid columns wide over rng:
// the range over the panel's pixels, at least minInterval (the data
// source's scrape interval), rounded up to a multiple of it.
func step(rng time.Duration, w int, minInterval time.Duration) time.Duration {
	if w <= 0 {
		w = 24
	}
	px := dashboardWidthPx * w / 24
	s := rng / time.Duration(px)
	if s < minInterval {
		return minInterval
	}
	return (s + minInterval - 1) / minInterval * minInterval
}

var varRe = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// substitute writes the default view's variables into expr as Grafana
// would: every dashboard variable All (".*"), $__interval the step,
// $__rate_interval max(step + scrape, 4 × scrape), $__range the range.
func substitute(expr string, rng, stp, scrape time.Duration) (string, error) {
	var bad error
	out := varRe.ReplaceAllStringFunc(expr, func(m string) string {
		sm := varRe.FindStringSubmatch(m)
		switch name := sm[1] + sm[2]; name {
		case "__rate_interval":
			return promDuration(max(stp+scrape, 4*scrape))
		case "__interval":
			return promDuration(stp)
		case "__range":
			return promDuration(rng)
		case "__range_s":
			return strconv.Itoa(int(rng.Seconds()))
		case "__range_ms":
			return strconv.FormatInt(rng.Milliseconds(), 10)
		default:
			if strings.HasPrefix(name, "__") {
				bad = fmt.Errorf("unknown Grafana variable %s in %q", m, expr)
			}
			return ".*"
		}
	})
	return out, bad
}

// usesRange reports whether expr reads $__range (an instant query over the
// dashboard's range: its cost grows with the range like a range query's).
func usesRange(expr string) bool { return strings.Contains(expr, "$__range") }

// promDuration writes d as PromQL does: whole seconds.
func promDuration(d time.Duration) string {
	return strconv.Itoa(int(d.Round(time.Second).Seconds())) + "s"
}
