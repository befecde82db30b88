package simserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"time"
)

// Version is the server version every identity endpoint reports.
const Version = "1.0.0-sim"

// ModelRevision is the revision the identity endpoints report for a
// model: 40 hex digits, a Hugging Face commit's length, fixed by the
// model's name (two simulators serving one model agree on it).
func ModelRevision(model string) string {
	sum := sha256.Sum256([]byte("gpulens-sim model " + model))
	return hex.EncodeToString(sum[:20])
}

// modelDigest is Ollama's digest of the model: 64 hex digits.
func modelDigest(model string) string {
	sum := sha256.Sum256([]byte("gpulens-sim digest " + model))
	return hex.EncodeToString(sum[:])
}

// serveIdentity answers the endpoints by which inference servers say what
// they are, each shaped like its server's, with Version and the model's
// ModelRevision: vLLM's GET /version, TGI's GET /info, llama.cpp's GET
// /props, Ollama's GET /api/version, POST /api/show and GET /api/tags, and
// SGLang's GET /get_server_info (docs/simserver.md).
func (s *Server) serveIdentity(mux *http.ServeMux) {
	c := &s.cfg
	rev := ModelRevision(c.Model)
	modified := s.started.UTC().Format(time.RFC3339Nano)
	details := map[string]any{"parent_model": "", "format": "gguf", "family": "llama", "families": []string{"llama"},
		"parameter_size": "8.0B", "quantization_level": "BF16"}
	answer := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { writeIdentity(w, http.StatusOK, v) }
	}
	mux.HandleFunc("GET /version", answer(map[string]any{"version": Version}))
	mux.HandleFunc("GET /info", answer(map[string]any{
		"model_id": c.Model, "model_sha": rev, "model_dtype": "torch.bfloat16", "model_device_type": "cuda",
		"model_pipeline_tag": "text-generation", "max_concurrent_requests": max(c.MaxQueue, 128), "max_best_of": 1,
		"max_stop_sequences": 4, "max_input_tokens": c.KVCapacityTokens, "max_total_tokens": c.KVCapacityTokens,
		"validation_workers": 2, "max_client_batch_size": 4, "router": "text-generation-router", "version": Version,
		"sha": rev, "docker_label": nil,
	}))
	mux.HandleFunc("GET /props", answer(map[string]any{
		"default_generation_settings": map[string]any{"n_ctx": c.KVCapacityTokens, "model": c.Model,
			"params": map[string]any{"n_predict": -1, "temperature": 0.8, "top_p": 0.95, "seed": c.Seed}},
		"total_slots": c.MaxBatch, "model_path": "/models/" + c.Model + ".gguf",
		"chat_template": "{% for message in messages %}{{ message['content'] }}{% endfor %}", "build_info": "b" + Version,
	}))
	mux.HandleFunc("GET /api/version", answer(map[string]any{"version": Version}))
	mux.HandleFunc("POST /api/show", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Model, Name string }
		b, _ := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
		if err := json.Unmarshal(b, &req); err != nil {
			writeIdentity(w, http.StatusBadRequest, map[string]string{"error": "invalid request body"})
			return
		}
		name := req.Model
		if name == "" {
			name = req.Name
		}
		if name != c.Model && name != c.Model+":latest" {
			writeIdentity(w, http.StatusNotFound, map[string]string{"error": "model '" + name + "' not found"})
			return
		}
		writeIdentity(w, http.StatusOK, map[string]any{
			"license": "", "modelfile": "FROM /models/" + c.Model + ".gguf", "parameters": "", "template": "{{ .Prompt }}",
			"details": details, "modified_at": modified, "capabilities": []string{"completion"},
			"model_info": map[string]any{"general.architecture": "llama", "general.parameter_count": 8030261248,
				"llama.context_length": c.KVCapacityTokens},
		})
	})
	mux.HandleFunc("GET /api/tags", answer(map[string]any{"models": []any{map[string]any{
		"name": c.Model, "model": c.Model, "modified_at": modified, "size": 16060522240, "digest": modelDigest(c.Model), "details": details,
	}}}))
	mux.HandleFunc("GET /get_server_info", answer(map[string]any{
		"model_path": c.Model, "tokenizer_path": c.Model, "served_model_name": c.Model, "revision": rev, "dtype": "bfloat16",
		"kv_cache_dtype": "auto", "tp_size": 1, "dp_size": 1, "max_running_requests": c.MaxBatch, "context_length": c.KVCapacityTokens,
		"random_seed": c.Seed, "version": Version, "internal_states": []any{map[string]any{"last_gen_throughput": 0}},
	}))
}

// writeIdentity writes v as a JSON answer.
func writeIdentity(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
