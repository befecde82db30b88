package report

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/sim/simserver"
)

var endpoints = []string{"GET /version", "GET /info", "GET /props", "GET /api/version", "POST /api/show", "GET /api/tags", "GET /get_server_info", "GET /v1/models"}

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAskSimulator: the simulator answers every endpoint as its server
// does; the facts keep the scalar fields, the version and the model
// revision are derived.
func TestAskSimulator(t *testing.T) {
	s, err := simserver.New(simserver.Config{FixedTTFT: time.Millisecond, Model: "org/llama-8b", KVCapacityTokens: 65536, MaxBatch: 64, Seed: 7}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, s.Handler())
	facts := AskServer(context.Background(), ServerConfig{BaseURL: url + "/v1/", Model: "org/llama-8b"})
	if len(facts) != len(endpoints) {
		t.Fatalf("%d facts, want %d", len(facts), len(endpoints))
	}
	rev := simserver.ModelRevision("org/llama-8b")
	want := map[string]map[string]string{
		"GET /version": {"version": "1.0.0-sim"},
		"GET /info":    {"model_id": "org/llama-8b", "model_sha": rev, "model_dtype": "torch.bfloat16", "version": "1.0.0-sim", "max_total_tokens": "65536", "router": "text-generation-router"},
		"GET /props": {"build_info": "b1.0.0-sim", "total_slots": "64", "default_generation_settings.n_ctx": "65536",
			"default_generation_settings.params.temperature": "0.8", "model_path": "/models/org/llama-8b.gguf"},
		"GET /api/version":     {"version": "1.0.0-sim"},
		"POST /api/show":       {"details.format": "gguf", "details.quantization_level": "BF16", "model_info.general.parameter_count": "8030261248", "model_info.llama.context_length": "65536"},
		"GET /api/tags":        {"name": "org/llama-8b", "size": "16060522240", "details.family": "llama"},
		"GET /get_server_info": {"revision": rev, "version": "1.0.0-sim", "tp_size": "1", "random_seed": "7"},
		"GET /v1/models":       {"id": "org/llama-8b", "owned_by": "gpulens", "object": "model"},
	}
	for i, f := range facts {
		if f.Endpoint != endpoints[i] || f.Status != http.StatusOK || f.Error != "" {
			t.Errorf("fact %d: %s status %d error %q, want %s 200", i, f.Endpoint, f.Status, f.Error, endpoints[i])
			continue
		}
		for k, v := range want[f.Endpoint] {
			if f.Fields[k] != v {
				t.Errorf("%s: %s = %q, want %q", f.Endpoint, k, f.Fields[k], v)
			}
		}
		// Arrays, nulls and long texts are left out.
		for _, k := range []string{"internal_states", "families", "details.families", "docker_label", "capabilities", "permission"} {
			if _, ok := f.Fields[k]; ok {
				t.Errorf("%s: %s kept", f.Endpoint, k)
			}
		}
	}
	if d := facts[5].Fields["digest"]; len(d) != 64 {
		t.Errorf("Ollama digest %q, want 64 hex digits", d)
	}
	if v, r := Derive(facts); v != "1.0.0-sim" || r != rev {
		t.Errorf("Derive = %q, %q; want 1.0.0-sim, %s", v, r, rev)
	}
}

// TestAskServers: servers that answer some endpoints, 404, garbage, a
// redirect or nothing at all; the run's questions never fail.
func TestAskServers(t *testing.T) {
	const key = "sk-test-123"
	vllm := http.NewServeMux()
	vllm.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"version":"0.11.0"}`) })
	vllm.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, "unauthorised", http.StatusUnauthorized)
			return
		}
		io.WriteString(w, `{"object":"list","data":[{"id":"other"},{"id":"m","root":"/models/m","max_model_len":8192,"parent":null,"permission":[{"id":"p"}]}]}`)
	})
	tgi := http.NewServeMux()
	tgi.HandleFunc("GET /info", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"model_id":"mistralai/Ministral-8B-Instruct-2410","model_sha":"4847e87e5975a573a2a190399ca62cd266c899ad","model_pipeline_tag":null,"max_input_tokens":32767,"version":"3.2.1","sha":"4d28897b4e345f4dfdd93d3434e50ac8afcdf9e1","docker_label":"sha-4d28897"}`)
	})
	ollama := http.NewServeMux()
	ollama.HandleFunc("GET /api/version", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"version":"0.5.7"}`) })
	ollama.HandleFunc("POST /api/show", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) != `{"model":"m"}` {
			http.Error(w, `{"error":"bad body"}`, http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{"license":"`+strings.Repeat("L", 300)+`","details":{"format":"gguf","parameter_size":"8.0B"}}`)
	})
	ollama.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, `{"models":[{"name":"x:latest","digest":"aa"},{"name":"m:latest","model":"m:latest","digest":"365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1","size":4661224676}]}`)
	})
	garbage := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/version":
			io.WriteString(w, `[1,2]`)
		case "/api/tags":
			io.WriteString(w, `{"models":[{"name":"not-m"}]}`)
		case "/v1/models":
			io.WriteString(w, `{"object":"list"}`)
		case "/info":
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[]}\n\n")
		}
	})
	// The body read first: the server notices the client leaving only then.
	hang := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	})

	for _, tc := range []struct {
		name, base        string
		fields            map[string]map[string]string // endpoint: fields expected
		errs              map[string]string            // endpoint: error expected (others: HTTP 404)
		version, revision string
	}{
		{"vLLM", serve(t, vllm) + "/v1", map[string]map[string]string{
			"GET /version":   {"version": "0.11.0"},
			"GET /v1/models": {"id": "m", "root": "/models/m", "max_model_len": "8192"},
		}, nil, "0.11.0", ""},
		{"TGI", serve(t, tgi) + "/v1", map[string]map[string]string{
			"GET /info": {"model_id": "mistralai/Ministral-8B-Instruct-2410", "model_sha": "4847e87e5975a573a2a190399ca62cd266c899ad", "version": "3.2.1",
				"sha": "4d28897b4e345f4dfdd93d3434e50ac8afcdf9e1", "docker_label": "sha-4d28897", "max_input_tokens": "32767"},
		}, nil, "3.2.1", "4847e87e5975a573a2a190399ca62cd266c899ad"},
		{"Ollama", serve(t, ollama) + "/v1", map[string]map[string]string{
			"GET /api/version": {"version": "0.5.7"},
			"POST /api/show":   {"details.format": "gguf", "details.parameter_size": "8.0B"},
			"GET /api/tags":    {"name": "m:latest", "model": "m:latest", "size": "4661224676", "digest": "365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1"},
		}, nil, "0.5.7", "365c0bd3c000a25d28ddbf732fe1c6add414de7275464c4e4d1c3b5fcb5d8ad1"},
		{"garbage", serve(t, garbage) + "/v1", nil, map[string]string{
			"GET /version": "not a JSON object", "GET /info": "HTTP 302", "GET /props": "not JSON: invalid character 'd' looking for beginning of value",
			"GET /api/version": "not JSON: invalid character 'd' looking for beginning of value", "POST /api/show": "not JSON: invalid character 'd' looking for beginning of value",
			"GET /api/tags": `model "m" is not among the 1 listed`, "GET /get_server_info": "not JSON: invalid character 'd' looking for beginning of value",
			"GET /v1/models": `no "data" list in the answer`,
		}, "", ""},
		{"hang", serve(t, hang) + "/v1", nil, map[string]string{
			"GET /version": "no answer within 50ms", "GET /info": "no answer within 50ms", "GET /props": "no answer within 50ms",
			"GET /api/version": "no answer within 50ms", "POST /api/show": "no answer within 50ms", "GET /api/tags": "no answer within 50ms",
			"GET /get_server_info": "no answer within 50ms", "GET /v1/models": "no answer within 50ms",
		}, "", ""},
		{"nothing listening", "http://127.0.0.1:1/v1", nil, nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A short timeout for the server that never answers; a long one
			// for the others, however loaded the machine.
			timeout := time.Minute
			if tc.name == "hang" {
				timeout = 50 * time.Millisecond
			}
			facts := AskServer(context.Background(), ServerConfig{BaseURL: tc.base, Model: "m", APIKey: key, Timeout: timeout})
			if len(facts) != len(endpoints) {
				t.Fatalf("%d facts", len(facts))
			}
			for i, f := range facts {
				if f.Endpoint != endpoints[i] {
					t.Errorf("fact %d is %s, want %s", i, f.Endpoint, endpoints[i])
				}
				wantF, wantE := tc.fields[f.Endpoint], tc.errs[f.Endpoint]
				switch {
				case tc.name == "nothing listening":
					if f.Status != 0 || !strings.Contains(f.Error, "connect") || f.Fields != nil {
						t.Errorf("%s: %+v, want a connection error", f.Endpoint, f)
					}
				case wantF != nil:
					if f.Status != 200 || f.Error != "" || len(f.Fields) != len(wantF) {
						t.Errorf("%s: %+v, want fields %v", f.Endpoint, f, wantF)
					}
					for k, v := range wantF {
						if f.Fields[k] != v {
							t.Errorf("%s: %s = %q, want %q", f.Endpoint, k, f.Fields[k], v)
						}
					}
				case wantE != "":
					if f.Error != wantE || f.Fields != nil {
						t.Errorf("%s: error %q fields %v, want error %q", f.Endpoint, f.Error, f.Fields, wantE)
					}
				default:
					if f.Status != 404 || f.Error != "HTTP 404" || f.Fields != nil {
						t.Errorf("%s: %+v, want HTTP 404", f.Endpoint, f)
					}
				}
				if strings.Contains(fmt.Sprint(f), key) {
					t.Errorf("%s: the API key is in %+v", f.Endpoint, f)
				}
			}
			if v, r := Derive(facts); v != tc.version || r != tc.revision {
				t.Errorf("Derive = %q, %q; want %q, %q", v, r, tc.version, tc.revision)
			}
		})
	}
}

// TestModelsWithoutV1: a target that does not end in /v1 is the root,
// and its models are at /models.
func TestModelsWithoutV1(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /gw/models", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"data":[{"id":"m"}]}`) })
	mux.HandleFunc("GET /gw/version", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"version":"9"}`) })
	facts := AskServer(context.Background(), ServerConfig{BaseURL: serve(t, mux) + "/gw", Model: "m"})
	if f := facts[7]; f.Endpoint != "GET /models" || f.Fields["id"] != "m" {
		t.Errorf("models fact %+v", f)
	}
	if f := facts[0]; f.Fields["version"] != "9" {
		t.Errorf("version fact %+v", f)
	}
}

func TestFlatten(t *testing.T) {
	obj, err := decodeObject([]byte(`{"a":1e3,"b":true,"c":null,"d":[1],"e":{"f":{"g":{"h":"deep","i":{"j":"too deep"}}}},"long":"` +
		strings.Repeat("x", 257) + `","ok":"` + strings.Repeat("y", 256) + `","n":-0.5}`))
	if err != nil {
		t.Fatal(err)
	}
	got := flatten(obj)
	want := map[string]string{"a": "1e3", "b": "true", "e.f.g.h": "deep", "ok": strings.Repeat("y", 256), "n": "-0.5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("flatten = %v, want %v", got, want)
	}
	big := map[string]any{}
	for i := range 300 {
		big[fmt.Sprintf("k%03d", i)] = "v"
	}
	got = flatten(big)
	if len(got) != maxFields || got["k000"] != "v" || got["k255"] != "v" || got["k256"] != "" {
		t.Errorf("capped flatten kept %d fields (k255 %q, k256 %q)", len(got), got["k255"], got["k256"])
	}
}

func TestDerivePrecedence(t *testing.T) {
	facts := []ServerFact{
		{Endpoint: "GET /version", Fields: map[string]string{"version": "0.11.0"}},
		{Endpoint: "GET /props", Fields: map[string]string{"build_info": "b5000-abc"}},
		{Endpoint: "GET /get_server_info", Fields: map[string]string{"version": "0.4.6", "revision": ""}},
		{Endpoint: "GET /api/tags", Fields: map[string]string{"digest": "d1"}},
	}
	if v, r := Derive(facts); v != "0.4.6" || r != "d1" {
		t.Errorf("Derive = %q, %q; want SGLang's 0.4.6 before llama.cpp and vLLM, the digest as revision", v, r)
	}
	if v, r := Derive(nil); v != "" || r != "" {
		t.Errorf("Derive(nil) = %q, %q", v, r)
	}
}

func TestParseLabels(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want map[string]string
		err  string
	}{
		{nil, nil, ""},
		{[]string{"image=ghcr.io/x/vllm@sha256:abc", "framework.version=0.11.0", "eval/commit=", "a=b=c"},
			map[string]string{"image": "ghcr.io/x/vllm@sha256:abc", "framework.version": "0.11.0", "eval/commit": "", "a": "b=c"}, ""},
		{[]string{"novalue"}, nil, `"novalue": want key=value`},
		{[]string{"=v"}, nil, `"=v": the key must be 1 to 128 letters`},
		{[]string{"bad key=v"}, nil, `"bad key=v": the key must be`},
		{[]string{"k=a\nb"}, nil, "without control characters"},
		{[]string{"k=1", "k=2"}, nil, `"k=2": key "k" given twice`},
	} {
		got, err := ParseLabels(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestCanonical(t *testing.T) {
	b, err := Canonical(struct {
		Z float64           `json:"z"`
		A map[string]string `json:"a"`
		M string            `json:"m"`
	}{0.1, map[string]string{"y": "<", "b": "x"}, "é"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":{"b":"x","y":"<"},"m":"é","z":0.1}`; string(b) != want {
		t.Errorf("canonical %s, want %s", b, want)
	}
}

func TestSettingsHash(t *testing.T) {
	base := Configuration{
		Settings: Settings{Mode: "closed", Concurrency: 1, DurationSeconds: 60, TimeoutSeconds: 300, Endpoint: "chat", Model: "m",
			InputTokens: "fixed:256", OutputTokens: "fixed:128", Seed: 1, Prompts: "distinct", Dataset: "a.jsonl", Shard: "0/2",
			Cost: CostSettings{GPUHourlyUSD: 2, GPUs: 1}},
		Levels: []float64{1, 2, 4}, Repeats: 3, DatasetSHA256: "ab", Shards: 2,
	}
	h := func(mod func(*Configuration)) string {
		c := base
		c.Levels = append([]float64(nil), base.Levels...)
		if mod != nil {
			mod(&c)
		}
		s, err := SettingsHash(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	h0 := h(nil)
	if len(h0) != 64 {
		t.Fatalf("hash %q", h0)
	}
	for name, mod := range map[string]func(*Configuration){
		"another level's run": func(c *Configuration) { c.Settings.Concurrency = 4 },
		"another shard":       func(c *Configuration) { c.Settings.Shard = "1/2" },
		"dataset renamed":     func(c *Configuration) { c.Settings.Dataset = "b.jsonl" },
		"other prices":        func(c *Configuration) { c.Settings.Cost = CostSettings{GPUHourlyUSD: 9, GPUs: 8} },
	} {
		if got := h(mod); got != h0 {
			t.Errorf("%s: hash changed", name)
		}
	}
	for name, mod := range map[string]func(*Configuration){
		"seed":          func(c *Configuration) { c.Settings.Seed = 2 },
		"levels":        func(c *Configuration) { c.Levels = []float64{1, 2, 8} },
		"repeats":       func(c *Configuration) { c.Repeats = 1 },
		"dataset bytes": func(c *Configuration) { c.DatasetSHA256 = "cd" },
		"shards":        func(c *Configuration) { c.Shards = 4 },
		"max_tokens":    func(c *Configuration) { c.Settings.MaxTokens = 64 },
		"SLO":           func(c *Configuration) { c.Settings.SLO.TTFTSeconds = 0.5 },
		"timestamps":    func(c *Configuration) { c.Settings.Timestamps = "read" },
		"saturation":    func(c *Configuration) { c.Saturation = &Saturation{MaxErrorRatio: 0.05, MinGoodputRatio: 0.9} },
		"usage":         func(c *Configuration) { c.ContinuousUsage = true },
		"shared prefix": func(c *Configuration) {
			c.Settings.SharedPrefix = SharedPrefixSettings{Groups: 8, Tokens: "fixed:1000", Pick: "uniform"}
		},
		"images": func(c *Configuration) {
			c.Settings.Images = ImageSettings{PerRequest: 1, Width: 512, Height: 512, Format: "png", Distinct: 16}
		},
		"image files": func(c *Configuration) {
			c.Settings.Images = ImageSettings{PerRequest: 1, Files: "a.png", FilesSHA256: "ab"}
		},
	} {
		if got := h(mod); got == h0 {
			t.Errorf("%s: hash unchanged", name)
		}
	}
	// The hash is that of the canonical JSON documented in docs/loadgen.md.
	c := base
	c.Settings.Concurrency, c.Settings.Shard, c.Settings.Dataset, c.Settings.Cost = 0, "", "", CostSettings{}
	b, _ := Canonical(struct {
		Settings      Settings  `json:"settings"`
		Levels        []float64 `json:"levels"`
		Repeats       int       `json:"repeats"`
		DatasetSHA256 string    `json:"dataset_sha256"`
		Shards        int       `json:"shards"`
	}{c.Settings, c.Levels, c.Repeats, c.DatasetSHA256, c.Shards})
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h0 {
		t.Errorf("hash %s is not the SHA-256 of %s", h0, b)
	}
	if !strings.Contains(string(b), `"levels":[1,2,4]`) || strings.Contains(string(b), "a.jsonl") || strings.Contains(string(b), `"gpu_hourly_usd":2`) {
		t.Errorf("canonical settings %s", b)
	}
}

func TestHost(t *testing.T) {
	h := Host()
	if h.OS != runtime.GOOS || h.Arch != runtime.GOARCH || h.CPUs != runtime.NumCPU() {
		t.Errorf("host %+v", h)
	}
	if want, _ := os.Hostname(); h.Hostname != want {
		t.Errorf("hostname %q, want %q", h.Hostname, want)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil && h.Kernel != strings.TrimSpace(string(b)) {
		t.Errorf("kernel %q, want %q", h.Kernel, strings.TrimSpace(string(b)))
	}
	dir := t.TempDir()
	for _, tc := range []struct{ text, want string }{
		{"processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n", "Intel(R) Xeon(R) Platinum 8480+"},
		{"processor\t: 0\nBogoMIPS\t: 50.00\n\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n", "Raspberry Pi 4 Model B Rev 1.4"},
		{"processor\t: 0\n", ""},
	} {
		p := filepath.Join(dir, "cpuinfo")
		os.WriteFile(p, []byte(tc.text), 0o600)
		if got := cpuModel(p); got != tc.want {
			t.Errorf("cpuModel = %q, want %q", got, tc.want)
		}
	}
	if got := cpuModel(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("cpuModel of a missing file = %q", got)
	}
}
