package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/gpulens/gpulens/loadgen/option"
)

// Output-length fields (Config.MaxTokensField).
const (
	// MaxTokensAuto: FieldMaxCompletionTokens for the chat endpoint of
	// OpenAI's own API (api.openai.com, Azure OpenAI: its reasoning models
	// reject max_tokens), else FieldMaxTokens (what every other server
	// reads; many know no other).
	MaxTokensAuto = "auto"
	// FieldMaxTokens is the classic max_tokens.
	FieldMaxTokens = "max_tokens"
	// FieldMaxCompletionTokens is the chat API's newer
	// max_completion_tokens (OpenAI, vLLM, SGLang).
	FieldMaxCompletionTokens = "max_completion_tokens"
)

// reservedBody are the body fields the client writes itself: ExtraBody
// may not carry them.
var reservedBody = []string{"model", "messages", "prompt", "stream", "stream_options", FieldMaxTokens, FieldMaxCompletionTokens, "ignore_eos"}

// Message is one chat message of a request's history (Request.History).
type Message struct {
	Role, Content string
}

// Header is one request header of Config.Headers. Secret marks a value
// never written anywhere (reports, logs, errors): see IsSecretHeader.
type Header struct {
	Name, Value string
	Secret      bool
}

// secretWords mark a header whose value is a credential.
var secretWords = []string{"auth", "token", "key", "secret", "password", "cookie", "session", "signature"}

// IsSecretHeader reports whether a header name reads as a credential's:
// Authorization, Proxy-Authorization, api-key, X-Api-Key, Cookie, or any
// name holding auth, token, key, secret, password, cookie, session or
// signature (any case).
func IsSecretHeader(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// managedHeaders are the headers the client sets itself.
var managedHeaders = []string{"Content-Type", "Content-Length", "Accept", "Host", "Connection", "Transfer-Encoding", "Te", "Upgrade", "Trailer", "Accept-Encoding", "Expect", "Keep-Alive"}

// ParseHeader parses "Name: value" (one header of a command line). The
// value may be empty; the name must be an HTTP token.
func ParseHeader(s string) (Header, error) {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return Header{}, fmt.Errorf("%q: want Name: value", s)
	}
	h := Header{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)}
	return h, h.check()
}

// check validates a header's name and value.
func (h Header) check() error {
	if h.Name == "" || strings.IndexFunc(h.Name, func(r rune) bool { return !isTokenChar(r) }) >= 0 {
		return fmt.Errorf("header name %q: want letters, digits and !#$%%&'*+-.^_`|~", h.Name)
	}
	if strings.ContainsAny(h.Value, "\r\n\x00") {
		return fmt.Errorf("header %s: the value must not contain line breaks or NUL", h.Name)
	}
	return nil
}

func isTokenChar(r rune) bool {
	return r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// requestParts are the parts of every request body and header block that
// Config sets besides the prompt, checked and encoded once by New.
type requestParts struct {
	extra    []byte // `,"k":v…` to append before the body's closing brace
	maxField string // FieldMaxTokens or FieldMaxCompletionTokens
	headers  []Header
	secrets  []string // values to scrub from error texts
}

// prepareRequest checks Config's request options and encodes them.
func prepareRequest(cfg *Config) (requestParts, error) {
	var p requestParts
	var err error
	if p.extra, err = extraFields(cfg.ExtraBody); err != nil {
		return p, err
	}
	switch f := cfg.MaxTokensField; f {
	case "", MaxTokensAuto:
		p.maxField = autoMaxTokensField(cfg.BaseURL, cfg.Endpoint)
	case FieldMaxTokens, FieldMaxCompletionTokens:
		p.maxField = f
	default:
		return p, option.Errorf("%s %q: want %s, %s or %s", option.Name("MaxTokensField"), f, MaxTokensAuto, FieldMaxTokens, FieldMaxCompletionTokens)
	}
	seen := map[string]bool{}
	for _, h := range cfg.Headers {
		if err := h.check(); err != nil {
			return p, option.Errorf("%s: %v", option.Name("Headers"), err)
		}
		canon := http.CanonicalHeaderKey(h.Name)
		switch {
		case slices.Contains(managedHeaders, canon):
			return p, option.Errorf("%s: %s is set by the load generator", option.Name("Headers"), h.Name)
		case canon == "Authorization" && cfg.APIKey != "":
			return p, option.Errorf("%s: Authorization given and %s set: use one", option.Name("Headers"), option.Name("APIKey"))
		case seen[canon]:
			return p, option.Errorf("%s: %s given twice", option.Name("Headers"), h.Name)
		}
		seen[canon] = true
		h.Secret = h.Secret || IsSecretHeader(h.Name)
		if h.Secret && h.Value != "" {
			p.secrets = append(p.secrets, h.Value)
		}
		p.headers = append(p.headers, h)
	}
	return p, nil
}

// autoMaxTokensField is MaxTokensAuto's choice for a base URL and endpoint.
func autoMaxTokensField(base, endpoint string) string {
	if endpoint != EndpointChat {
		return FieldMaxTokens // the legacy completions API has no other
	}
	u, err := url.Parse(base)
	if err != nil {
		return FieldMaxTokens
	}
	host := strings.ToLower(u.Hostname())
	if host == "api.openai.com" || strings.HasSuffix(host, ".openai.azure.com") {
		return FieldMaxCompletionTokens
	}
	return FieldMaxTokens
}

// extraFields checks ExtraBody (one JSON object, none of the fields the
// client writes itself) and encodes its members as `,"k":v` in key order,
// compact.
func extraFields(raw json.RawMessage) ([]byte, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil || m == nil {
		if err == nil {
			err = fmt.Errorf("null")
		}
		return nil, option.Errorf("%s: want one JSON object: %v", option.Name("ExtraBody"), err)
	}
	if dec.More() {
		return nil, option.Errorf("%s: want one JSON object, found more after it", option.Name("ExtraBody"))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if slices.Contains(reservedBody, k) {
			return nil, option.Errorf("%s: %q is written by the load generator itself (the prompt, the model, the output length and ignore_eos have options of their own; every request streams)", option.Name("ExtraBody"), k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b []byte
	for _, k := range keys {
		var v bytes.Buffer
		if err := json.Compact(&v, m[k]); err != nil {
			return nil, option.Errorf("%s: %q: %v", option.Name("ExtraBody"), k, err)
		}
		b = append(b, ',')
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = append(b, v.Bytes()...)
	}
	return b, nil
}

// MaxTokensField is the body field that carries each request's output
// length (Config.MaxTokensField resolved).
func (c *Client) MaxTokensField() string { return c.req.maxField }

// ExtraBody is Config.ExtraBody as every body carries it: one compact
// JSON object, keys sorted ("" when none).
func (c *Client) ExtraBody() string {
	if len(c.req.extra) == 0 {
		return ""
	}
	return "{" + string(c.req.extra[1:]) + "}"
}

// RedactedHeaders are Config.Headers as "Name: value" with every secret
// value replaced by [REDACTED], in the order given.
func (c *Client) RedactedHeaders() []string {
	out := make([]string, 0, len(c.req.headers))
	for _, h := range c.req.headers {
		v := h.Value
		if h.Secret {
			v = redacted
		}
		out = append(out, h.Name+": "+v)
	}
	return out
}

// SetHeaders sets Config.Headers on an HTTP request (the tokenize
// endpoint, the server's identity questions).
func (c *Client) SetHeaders(h http.Header) {
	for _, x := range c.req.headers {
		h.Set(x.Name, x.Value)
	}
}

// completionPrompt is the completions API's prompt of a request with a
// system prompt or a history: each part, then a blank line, then the
// prompt.
func completionPrompt(r Request) string {
	var sb strings.Builder
	if r.System != "" {
		sb.WriteString(r.System)
		sb.WriteString("\n\n")
	}
	for _, m := range r.History {
		sb.WriteString(m.Content)
		sb.WriteString("\n\n")
	}
	sb.WriteString(r.Prompt)
	return sb.String()
}
