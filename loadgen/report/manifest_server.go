package report

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// DefaultTimeout bounds each question to the server when
// ServerConfig.Timeout is zero.
const DefaultTimeout = 2 * time.Second

// Limits on what is kept of an answer.
const (
	maxBody     = 4 << 20 // bytes read of an answer
	maxFields   = 256     // fields kept per endpoint (the first, sorted)
	maxValueLen = 256     // longer strings (templates, licences) are dropped
	maxDepth    = 4       // nesting of objects flattened
)

// ServerConfig says how to reach the server.
type ServerConfig struct {
	// BaseURL is the API base URL, ending in /v1; the servers' own
	// endpoints are asked at its root (BaseURL without /v1).
	BaseURL string
	// Model is the model requested: the entry kept of /v1/models and
	// Ollama's /api/tags, and the model of Ollama's /api/show.
	Model string
	// APIKey, when set, is sent as a bearer token, as with the requests;
	// Header are more headers sent with every question (a gateway's, as
	// with the requests).
	APIKey string
	Header http.Header
	TLS    *tls.Config
	// Timeout bounds each question (DefaultTimeout when zero); they are
	// asked at once, so AskServer takes at most about that long.
	Timeout time.Duration
	// Transport overrides the HTTP transport (tests).
	Transport http.RoundTripper
}

// question is one endpoint asked.
type question struct {
	method, path string // path from the server's root
	// list, when set, names the array of entries of which the model's is
	// kept, and the keys that name an entry.
	list  string
	names []string
	post  bool // body {"model": Model}
}

// questions are asked in this order and reported in it.
var questions = []question{
	{method: http.MethodGet, path: "/version"},                                                    // vLLM (and SGLang)
	{method: http.MethodGet, path: "/info"},                                                       // TGI
	{method: http.MethodGet, path: "/props"},                                                      // llama.cpp
	{method: http.MethodGet, path: "/api/version"},                                                // Ollama
	{method: http.MethodPost, path: "/api/show", post: true},                                      // Ollama
	{method: http.MethodGet, path: "/api/tags", list: "models", names: []string{"name", "model"}}, // Ollama
	{method: http.MethodGet, path: "/get_server_info"},                                            // SGLang
	{method: http.MethodGet, path: "/v1/models", list: "data", names: []string{"id"}},             // every OpenAI-compatible server
}

// AskServer asks the server every endpoint at once, each within the
// timeout, and returns one fact per endpoint, answered or not, in a fixed
// order. It never fails: an endpoint that does not answer, answers an
// HTTP error or something other than a JSON object has its status and
// error recorded. The Fields of an answer are its scalar values (strings
// up to 256 bytes, numbers as written, booleans), nested objects
// flattened with dotted keys to depth 4, arrays and nulls left out, at
// most 256 per endpoint; for /v1/models and /api/tags, those of the
// model's entry.
func AskServer(ctx context.Context, cfg ServerConfig) []ServerFact {
	base := strings.TrimRight(cfg.BaseURL, "/")
	root, hasV1 := strings.CutSuffix(base, "/v1")
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	tr := cfg.Transport
	if tr == nil {
		t := &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: cfg.TLS, DisableCompression: false}
		defer t.CloseIdleConnections()
		tr = t
	}
	hc := &http.Client{Transport: tr,
		// A redirect elsewhere is not the server answering.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	facts := make([]ServerFact, len(questions))
	var wg sync.WaitGroup
	for i, q := range questions {
		url, endpoint := root+q.path, q.method+" "+q.path
		if q.path == "/v1/models" && !hasV1 {
			url, endpoint = base+"/models", q.method+" /models"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			facts[i] = ask(ctx, hc, cfg, q, url, timeout)
			facts[i].Endpoint = endpoint
		}()
	}
	wg.Wait()
	return facts
}

// ask asks one question.
func ask(ctx context.Context, hc *http.Client, cfg ServerConfig, q question, url string, timeout time.Duration) ServerFact {
	var f ServerFact
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if q.post {
		b, _ := json.Marshal(map[string]string{"model": cfg.Model})
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, q.method, url, body)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	for k, v := range cfg.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if q.post {
		req.Header.Set("Content-Type", "application/json")
	}
	if cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			f.Error = fmt.Sprintf("no answer within %s", timeout)
		} else {
			f.Error = scrub(err.Error(), cfg.APIKey)
		}
		return f
	}
	defer resp.Body.Close()
	f.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		f.Error = fmt.Sprintf("HTTP %d", resp.StatusCode)
		return f
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		f.Error = fmt.Sprintf("no complete answer within %s", timeout)
		return f
	case err != nil:
		f.Error = "reading the answer: " + scrub(err.Error(), cfg.APIKey)
		return f
	case len(b) > maxBody:
		f.Error = fmt.Sprintf("answer longer than %d bytes", maxBody)
		return f
	}
	obj, err := decodeObject(b)
	if err != nil {
		f.Error = err.Error()
		return f
	}
	if q.list != "" {
		if obj, err = entry(obj, q, cfg.Model); err != nil {
			f.Error = err.Error()
			return f
		}
	}
	f.Fields = flatten(obj)
	return f
}

// scrub removes the API key from an error text.
func scrub(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[REDACTED]")
}

// decodeObject decodes a JSON object, numbers kept as written.
func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

// entry returns the model's entry of the list q names in obj: the one
// whose name (q.names) is the model, or the model with Ollama's default
// tag ":latest".
func entry(obj map[string]any, q question, model string) (map[string]any, error) {
	list, ok := obj[q.list].([]any)
	if !ok {
		return nil, fmt.Errorf("no %q list in the answer", q.list)
	}
	for _, want := range []string{model, model + ":latest"} {
		for _, e := range list {
			m, ok := e.(map[string]any)
			if !ok {
				continue
			}
			for _, k := range q.names {
				if s, _ := m[k].(string); s == want {
					return m, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("model %q is not among the %d listed", model, len(list))
}

// flatten keeps the scalar values of obj (see AskServer).
func flatten(obj map[string]any) map[string]string {
	out := map[string]string{}
	var walk func(prefix string, m map[string]any, depth int)
	walk = func(prefix string, m map[string]any, depth int) {
		for k, v := range m {
			key := prefix + k
			switch x := v.(type) {
			case string:
				if len(x) <= maxValueLen {
					out[key] = x
				}
			case json.Number:
				out[key] = x.String()
			case bool:
				out[key] = fmt.Sprint(x)
			case map[string]any:
				if depth < maxDepth {
					walk(key+".", x, depth+1)
				}
			}
		}
	}
	walk("", obj, 1)
	if len(out) > maxFields {
		keys := make([]string, 0, len(out))
		for k := range out {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys[maxFields:] {
			delete(out, k)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// derivations name, most specific server first, the fields an answer
// gives the server's version and the model's revision in.
var (
	versionFrom = []struct{ endpoint, field string }{
		{"GET /info", "version"},            // TGI
		{"GET /get_server_info", "version"}, // SGLang
		{"GET /props", "build_info"},        // llama.cpp
		{"GET /api/version", "version"},     // Ollama
		{"GET /version", "version"},         // vLLM
	}
	revisionFrom = []struct{ endpoint, field string }{
		{"GET /info", "model_sha"},           // TGI: the Hugging Face commit
		{"GET /get_server_info", "revision"}, // SGLang's --revision
		{"GET /api/tags", "digest"},          // Ollama: the model's digest
	}
)

// Derive returns the server's version and the model's revision from the
// facts AskServer returned (the first of versionFrom and revisionFrom an
// answer carries), or "" for what none told.
func Derive(facts []ServerFact) (serverVersion, modelRevision string) {
	pick := func(from []struct{ endpoint, field string }) string {
		for _, d := range from {
			for _, f := range facts {
				if f.Endpoint == d.endpoint && f.Fields[d.field] != "" {
					return f.Fields[d.field]
				}
			}
		}
		return ""
	}
	return pick(versionFrom), pick(revisionFrom)
}
