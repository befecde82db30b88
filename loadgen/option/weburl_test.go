package option

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want string // "" accepted; else a part of the error
	}{
		{"http://127.0.0.1:8000/v1", ""},
		{"https://api.example.com/v1", ""},
		{"http://localhost/metrics", ""},
		{"http://[::1]:9835/metrics", ""},
		{"http://[fe80::1%25eth0]:80/v1", ""},
		{"http://user:pw@host.internal:1/v1", ""},
		{"http://my_host.local./v1", ""},
		{"http://127.0.0.1:65535/v1", ""},
		{"http://127.0.0.1:99999/v1", "port 99999 out of range"},
		{"http://127.0.0.1:0/v1", "port 0 out of range"},
		{"http://127.0.0.1:/v1", "empty port"},
		{"http://127.0.0.1:80a/v1", "invalid port"},
		{"http://999.1.1.1/v1", "not an IPv4 address"},
		{"http://1.2.3/v1", "not an IPv4 address"},
		{"http://a..b/v1", "empty label"},
		{"http://-a.b/v1", "starts or ends with '-'"},
		{"http://a!b/v1", "not allowed"},
		{"http://" + strings.Repeat("a", 64) + ".com/v1", "longer than 63"},
		{"http://[::1/v1", "missing ']'"},
		{"http://[1.2.3.4]/v1", "invalid IP-literal"},
		{"http://[::ffff:1.2.3.4]:1/v1", ""},
		{"http:///v1", "no host"},
		{"http://:8000/v1", "empty host"},
		{"http:host/v1", "no host"},
		{"127.0.0.1:8000/v1", "first path segment in URL cannot contain colon"},
		{"localhost:8000", "scheme \"localhost\""},
		{"ftp://host/v1", "scheme \"ftp\""},
		{"/v1", "scheme \"\""},
		{"", "empty URL"},
		{" http://host/v1", "white space"},
		{"http://host/v1#x", "fragment"},
		{"http://host/v1 x", ""}, // a space in the path is escaped, the host is fine
	} {
		u, err := Check(tc.raw)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want accepted", tc.raw, err)
		case tc.want == "" && u == nil:
			t.Errorf("Check(%q) returned no URL", tc.raw)
		case tc.want != "" && err == nil:
			t.Errorf("Check(%q) accepted, want an error containing %q", tc.raw, tc.want)
		case tc.want != "" && !strings.Contains(err.Error(), tc.want):
			t.Errorf("Check(%q) = %v, want it to contain %q", tc.raw, err, tc.want)
		}
	}
}
