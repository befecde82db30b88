package simserver

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestIdentityEndpoints: each endpoint answers as its server does; Ollama's
// /api/show knows only the model served (by "model", or the older "name",
// with or without ":latest").
func TestIdentityEndpoints(t *testing.T) {
	t.Parallel()
	s, err := New(Config{FixedTTFT: time.Millisecond, Model: "m"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	rev := ModelRevision("m")
	if len(rev) != 40 || rev == ModelRevision("n") || rev != ModelRevision("m") {
		t.Fatalf("revision %q: want 40 hex digits fixed by the model", rev)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               []string
	}{
		{"GET", "/version", "", 200, []string{`{"version":"1.0.0-sim"}`}},
		{"GET", "/info", "", 200, []string{`"model_id":"m"`, `"model_sha":"` + rev + `"`, `"version":"1.0.0-sim"`, `"router":"text-generation-router"`}},
		{"GET", "/props", "", 200, []string{`"build_info":"b1.0.0-sim"`, `"default_generation_settings":{`, `"model_path":"/models/m.gguf"`}},
		{"GET", "/api/version", "", 200, []string{`{"version":"1.0.0-sim"}`}},
		{"POST", "/api/show", `{"model":"m"}`, 200, []string{`"details":{`, `"quantization_level":"BF16"`}},
		{"POST", "/api/show", `{"name":"m:latest"}`, 200, []string{`"format":"gguf"`}},
		{"POST", "/api/show", `{"model":"other"}`, 404, []string{`{"error":"model 'other' not found"}`}},
		{"POST", "/api/show", `not json`, 400, []string{`"error"`}},
		{"GET", "/api/tags", "", 200, []string{`"name":"m"`, `"digest":"` + modelDigest("m") + `"`}},
		{"GET", "/get_server_info", "", 200, []string{`"revision":"` + rev + `"`, `"version":"1.0.0-sim"`, `"served_model_name":"m"`}},
		{"POST", "/version", "", 405, nil},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: HTTP %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
		if tc.status == 200 && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, resp.Header.Get("Content-Type"))
		}
		for _, w := range tc.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s %s: %s lacks %s", tc.method, tc.path, b, w)
			}
		}
	}
}
