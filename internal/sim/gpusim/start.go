package gpusim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of a start given on a command line (ParseStart).
const (
	// MaxStartAhead: a start in the future holds sim time at zero until
	// then (so that processes started one after the other can begin the
	// timeline together); further ahead than this is a mistake.
	MaxStartAhead = time.Hour
	// MaxStartAge: sim time begins at now − start. A day covers any run
	// that shares one timeline; much older would also cost the first energy
	// reading one power evaluation per simulated second.
	MaxStartAge = 24 * time.Hour
)

// ParseStart parses the start of a shared simulated timeline (Options.Start,
// the commands' --sim.start): Unix seconds, with an optional fraction
// ("1767225600", "1767225600.25"), or RFC 3339 ("2026-01-01T00:00:00Z",
// "2026-01-01T01:00:00.5+01:00"). Several processes given the same start
// (an exporter, gpulens-verify, a workload) see the same sim time at the
// same instant, so they agree on where a scenario's timeline is. The start
// must lie between MaxStartAge before now and MaxStartAhead after it.
func ParseStart(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("empty: give Unix seconds (e.g. 1767225600.5) or RFC 3339 (e.g. 2026-01-01T00:00:00Z)")
	}
	var t time.Time
	if strings.ContainsAny(s, "-:T") {
		var err error
		if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (e.g. 2026-01-01T00:00:00Z)", s)
		}
	} else {
		var err error
		if t, err = parseUnixSeconds(s); err != nil {
			return time.Time{}, err
		}
	}
	switch {
	case t.After(now.Add(MaxStartAhead)):
		return time.Time{}, fmt.Errorf("%s is %s in the future; at most %s ahead", t.UTC().Format(time.RFC3339Nano), t.Sub(now).Round(time.Second), MaxStartAhead)
	case t.Before(now.Add(-MaxStartAge)):
		return time.Time{}, fmt.Errorf("%s is %s ago; at most %s", t.UTC().Format(time.RFC3339Nano), now.Sub(t).Round(time.Second), MaxStartAge)
	}
	return t, nil
}

// parseUnixSeconds parses "1767225600" or "1767225600.123456789" exactly
// (no float rounding).
func parseUnixSeconds(s string) (time.Time, error) {
	bad := fmt.Errorf("%q is neither Unix seconds (e.g. 1767225600.5) nor RFC 3339 (e.g. 2026-01-01T00:00:00Z)", s)
	whole, frac, hasFrac := strings.Cut(s, ".")
	if whole == "" || strings.HasPrefix(whole, "+") {
		return time.Time{}, bad
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, bad
	}
	var nsec int64
	if hasFrac {
		if frac == "" || len(frac) > 9 || strings.Trim(frac, "0123456789") != "" {
			return time.Time{}, bad
		}
		nsec, _ = strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
	}
	return time.Unix(sec, nsec), nil
}
