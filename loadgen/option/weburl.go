// Package weburl checks the http(s) URLs the load generator is given
// (the API's base URL, an exporter's or a server's /metrics) before any
// request is sent: a malformed URL, a port out of range or a host name
// that cannot exist is bad input, not a run whose every request fails.

package option

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Check parses raw and returns it, or an error saying what is wrong with
// it: the scheme must be http or https; the host a DNS name (letters,
// digits, '-' and '_' in dot-separated labels of at most 63 characters), a
// dotted IPv4 address or a bracketed IPv6 address; the port, when given,
// 1-65535; no fragment.
func Check(raw string) (*url.URL, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, errors.New("empty URL")
	}
	if raw != strings.TrimSpace(raw) {
		return nil, errors.New("leading or trailing white space")
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q: must be http:// or https://", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, errors.New("no host (want http://HOST[:PORT]/...)")
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return nil, errors.New("a #fragment is never sent to a server")
	}
	if err := checkHost(u.Hostname(), strings.HasPrefix(u.Host, "[") || strings.Contains(u.Host, "@[")); err != nil {
		return nil, err
	}
	if strings.HasSuffix(u.Host, ":") {
		return nil, errors.New("empty port after ':'")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %s out of range 1-65535", p)
		}
	}
	return u, nil
}

// checkHost checks a host name or IP address (bracketed: an IPv6 literal).
func checkHost(h string, bracketed bool) error {
	if h == "" {
		return errors.New("empty host")
	}
	if bracketed || strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return fmt.Errorf("host [%s]: not an IPv6 address", h)
		}
		return nil
	}
	name := strings.TrimSuffix(h, ".") // a fully qualified name may end in a dot
	if len(name) > 253 {
		return fmt.Errorf("host %q: longer than 253 characters", h)
	}
	labels := strings.Split(name, ".")
	numeric := true
	for _, l := range labels {
		if l == "" {
			return fmt.Errorf("host %q: empty label", h)
		}
		if len(l) > 63 {
			return fmt.Errorf("host %q: label longer than 63 characters", h)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("host %q: a label starts or ends with '-'", h)
		}
		for _, c := range l {
			switch {
			case c >= '0' && c <= '9':
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
				numeric = false
			default:
				return fmt.Errorf("host %q: character %q not allowed in a host name", h, c)
			}
		}
	}
	// All-numeric labels are an IPv4 address or nothing (999.1.1.1, 1.2.3).
	if numeric {
		if a, err := netip.ParseAddr(name); err != nil || !a.Is4() {
			return fmt.Errorf("host %q: not an IPv4 address", h)
		}
	}
	return nil
}
