package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRequestOptionsInBody: the extra body's members, the system prompt
// and the chosen output-length field are in every body, which still
// decodes as encoding/json would write it (the extra members merged at the
// top level).
func TestRequestOptionsInBody(t *testing.T) {
	extra := `{"temperature":0, "seed":1, "chat_template_kwargs":{"enable_thinking":false}, "top_p":0.9}`
	for _, tc := range []struct {
		endpoint, field, system string
		want                    string
	}{
		{EndpointChat, FieldMaxCompletionTokens, "You are terse.",
			`{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"a \"b\""}],"max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"chat_template_kwargs":{"enable_thinking":false},"seed":1,"temperature":0,"top_p":0.9}`},
		{EndpointChat, "", "",
			`{"model":"m","messages":[{"role":"user","content":"a \"b\""}],"max_tokens":7,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"chat_template_kwargs":{"enable_thinking":false},"seed":1,"temperature":0,"top_p":0.9}`},
		{EndpointCompletions, FieldMaxTokens, "Sys\n",
			`{"model":"m","prompt":"Sys\n\n\na \"b\"","max_tokens":7,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true,"chat_template_kwargs":{"enable_thinking":false},"seed":1,"temperature":0,"top_p":0.9}`},
	} {
		c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: tc.endpoint, Model: "m", Timeout: time.Second,
			ExtraBody: json.RawMessage(extra), MaxTokensField: tc.field})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := c.Body(Request{Prompt: `a "b"`, MaxTokens: 7, IgnoreEOS: true, System: tc.system})
		if string(got) != tc.want {
			t.Errorf("body\n%s\nwant\n%s", got, tc.want)
		}
		var g, w map[string]any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		_ = json.Unmarshal([]byte(tc.want), &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("decoded %v, want %v", g, w)
		}
	}
	c, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Second, ExtraBody: json.RawMessage(extra)})
	if got, want := c.ExtraBody(), `{"chat_template_kwargs":{"enable_thinking":false},"seed":1,"temperature":0,"top_p":0.9}`; got != want {
		t.Errorf("ExtraBody() = %s, want %s", got, want)
	}
}

// TestMaxTokensFieldAuto: auto picks max_completion_tokens for OpenAI's
// own chat API (its reasoning models reject max_tokens), max_tokens
// elsewhere and for the completions API.
func TestMaxTokensFieldAuto(t *testing.T) {
	for _, tc := range []struct{ base, endpoint, want string }{
		{"https://api.openai.com/v1", EndpointChat, FieldMaxCompletionTokens},
		{"https://API.OpenAI.com:443/v1", EndpointChat, FieldMaxCompletionTokens},
		{"https://myres.openai.azure.com/openai/v1", EndpointChat, FieldMaxCompletionTokens},
		{"https://api.openai.com/v1", EndpointCompletions, FieldMaxTokens},
		{"http://localhost:8000/v1", EndpointChat, FieldMaxTokens},
		{"https://api.openai.com.example.net/v1", EndpointChat, FieldMaxTokens},
	} {
		c, err := New(Config{BaseURL: tc.base, Endpoint: tc.endpoint, Model: "m", Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.MaxTokensField(); got != tc.want {
			t.Errorf("%s %s: %s, want %s", tc.base, tc.endpoint, got, tc.want)
		}
	}
}

// TestRequestOptionsRejected: bad extra bodies, headers and fields are
// refused by New, naming the option.
func TestRequestOptionsRejected(t *testing.T) {
	for _, tc := range []struct {
		cfg  func(*Config)
		want string
	}{
		{func(c *Config) { c.ExtraBody = json.RawMessage(`{"seed":1`) }, "ExtraBody: want one JSON object"},
		{func(c *Config) { c.ExtraBody = json.RawMessage(`[1]`) }, "ExtraBody: want one JSON object"},
		{func(c *Config) { c.ExtraBody = json.RawMessage(`null`) }, "ExtraBody: want one JSON object"},
		{func(c *Config) { c.ExtraBody = json.RawMessage(`{"a":1} {"b":2}`) }, "ExtraBody: want one JSON object, found more"},
		{func(c *Config) { c.ExtraBody = json.RawMessage(`{"max_tokens":5}`) }, `ExtraBody: "max_tokens" is written by the load generator itself`},
		{func(c *Config) { c.ExtraBody = json.RawMessage(`{"stream":false}`) }, `ExtraBody: "stream" is written by the load generator itself`},
		{func(c *Config) { c.MaxTokensField = "max_new_tokens" }, `MaxTokensField "max_new_tokens": want auto, max_tokens or max_completion_tokens`},
		{func(c *Config) { c.Headers = []Header{{Name: "X Bad", Value: "v"}} }, `Headers: header name "X Bad"`},
		{func(c *Config) { c.Headers = []Header{{Name: "X-A", Value: "v\r\nX-B: w"}} }, "Headers: header X-A: the value must not contain line breaks"},
		{func(c *Config) { c.Headers = []Header{{Name: "content-type", Value: "text/plain"}} }, "Headers: content-type is set by the load generator"},
		{func(c *Config) { c.Headers = []Header{{Name: "X-A", Value: "1"}, {Name: "x-a", Value: "2"}} }, "Headers: x-a given twice"},
		{func(c *Config) { c.APIKey = "k"; c.Headers = []Header{{Name: "Authorization", Value: "Bearer x"}} }, "Headers: Authorization given and APIKey set"},
	} {
		cfg := Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Second}
		tc.cfg(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want %q", err, tc.want)
		}
	}
	for _, s := range []string{"no colon", ": v", "X Y: v"} {
		if _, err := ParseHeader(s); err == nil {
			t.Errorf("ParseHeader(%q) accepted", s)
		}
	}
	if h, err := ParseHeader(" X-Tenant :  a b "); err != nil || h != (Header{Name: "X-Tenant", Value: "a b"}) {
		t.Errorf("ParseHeader = %+v, %v", h, err)
	}
}

// TestHeadersSentAndSecretsScrubbed: every request carries the headers,
// through the client's own HTTP/1.1 and through net/http (a custom
// transport); a secret header's value, echoed by the server in an error,
// is scrubbed from the record and redacted in RedactedHeaders.
func TestHeadersSentAndSecretsScrubbed(t *testing.T) {
	const secret = "tok-0123456789"
	got := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
		http.Error(w, `{"error":{"message":"bad gateway token `+r.Header.Get("X-Gateway-Token")+`"}}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	headers := []Header{{Name: "X-Tenant", Value: "team-a"}, {Name: "X-Gateway-Token", Value: secret}, {Name: "X-Route", Value: "r1", Secret: true}}
	for _, tr := range []http.RoundTripper{nil, http.DefaultTransport} {
		c, err := New(Config{BaseURL: srv.URL + "/v1", Endpoint: EndpointChat, Model: "m", Timeout: 10 * time.Second, Headers: headers, Transport: tr})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		rec := c.Do(context.Background(), Request{Prompt: "p", MaxTokens: 1}, now, now)
		h := <-got
		if h.Get("X-Tenant") != "team-a" || h.Get("X-Gateway-Token") != secret || h.Get("X-Route") != "r1" || h.Get("Content-Type") != "application/json" {
			t.Errorf("transport %v: headers %v", tr, h)
		}
		if rec.ErrorClass == "" || strings.Contains(rec.Error, secret) || !strings.Contains(rec.Error, "bad gateway token [REDACTED]") {
			t.Errorf("record error %q (class %s): the secret must be scrubbed", rec.Error, rec.ErrorClass)
		}
		if want := []string{"X-Tenant: team-a", "X-Gateway-Token: [REDACTED]", "X-Route: [REDACTED]"}; !reflect.DeepEqual(c.RedactedHeaders(), want) {
			t.Errorf("RedactedHeaders() = %q, want %q", c.RedactedHeaders(), want)
		}
	}
	for name, want := range map[string]bool{"Authorization": true, "api-key": true, "X-Api-Key": true, "X-Auth-Token": true, "Cookie": true,
		"X-Client-Secret": true, "OpenAI-Organization": false, "X-Tenant": false, "Accept-Language": false} {
		if IsSecretHeader(name) != want {
			t.Errorf("IsSecretHeader(%q) = %v", name, !want)
		}
	}
}
