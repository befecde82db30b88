package client

import (
	"strings"
	"testing"
)

// scanCases are chunks as real servers send them, and odd ones. fast says
// whether the scanner must decide them itself (the hot shapes) or must
// hand them to encoding/json.
var scanCases = []struct {
	name, data string
	fast       bool
	want       parsed // compared on model, contentBytes, finished, usage
}{
	{"vllm chat", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`,
		true, parsed{model: []byte("m"), contentBytes: 5}},
	{"vllm role chunk", `{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		true, parsed{model: []byte("m")}},
	{"vllm continuous usage", `{"model":"m","choices":[{"index":0,"delta":{"content":"ab"}}],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}}`,
		true, parsed{model: []byte("m"), contentBytes: 2, hasUsage: true, usage: Usage{PromptTokens: 7, CompletionTokens: 2}}},
	{"usage chunk", `{"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"prompt_tokens_details":null}}`,
		true, parsed{model: []byte("m"), hasUsage: true, usage: Usage{PromptTokens: 7, CompletionTokens: 4}}},
	{"openai final delta empty", `{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		true, parsed{finished: true}},
	{"tgi", `{"object":"chat.completion.chunk","id":"","created":1,"model":"tgi","system_fingerprint":"2.0","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		true, parsed{model: []byte("tgi"), contentBytes: 2}},
	{"llama.cpp timings", `{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"model":"gpt","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":3,"total_tokens":5},"timings":{"prompt_n":3,"prompt_ms":1.5e1,"predicted_per_second":-0.25}}`,
		true, parsed{model: []byte("gpt"), finished: true, hasUsage: true, usage: Usage{PromptTokens: 3, CompletionTokens: 2}}},
	{"completions text", `{"choices":[{"text":"xyz","index":0,"logprobs":{"tokens":["x"],"top_logprobs":[{"x":-0.1}]},"finish_reason":"length"}]}`,
		true, parsed{contentBytes: 3, finished: true}},
	{"reasoning", `{"choices":[{"delta":{"reasoning_content":"abc","reasoning":"de","content":null}}]}`,
		true, parsed{contentBytes: 5}},
	{"escapes and utf-8", `{"choices":[{"delta":{"content":"a\nb\"\u00e9\ud83d\ude00é"}}]}`,
		true, parsed{contentBytes: 1 + 1 + 1 + 1 + 2 + 4 + 2}},
	{"unpaired surrogates", `{"choices":[{"delta":{"content":"\ud83d\u0041\ude00"}}]}`,
		true, parsed{contentBytes: 3 + 1 + 3}},
	{"invalid utf-8 replaced", "{\"choices\":[{\"delta\":{\"content\":\"a\xffb\"}}]}",
		true, parsed{contentBytes: 1 + 3 + 1}},
	{"whitespace", " {\n \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } , null ] } \r\n",
		true, parsed{contentBytes: 1}},
	{"null everywhere", `{"model":null,"choices":[{"delta":null,"text":null,"finish_reason":null}],"usage":null,"error":null,"gpulens_sim":null}`,
		true, parsed{}},
	{"usage null counts", `{"usage":{"prompt_tokens":null,"completion_tokens":-0}}`, true, parsed{hasUsage: true}},

	{"error object", `{"error":{"message":"overloaded","code":503}}`, false, parsed{}},
	{"sim timestamps", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"gpulens_sim":{"arrival_unix_nano":1,"first_token_unix_nano":2,"token_unix_nanos":[2]}}`,
		false, parsed{hasUsage: true, usage: Usage{PromptTokens: 1, CompletionTokens: 1}}},
	{"case-folded key", `{"choices":[{"delta":{"Content":"abc"}}]}`, false, parsed{contentBytes: 3}},
	{"escaped key", `{"choices":[{"delta":{"cont\u0065nt":"abc"}}]}`, false, parsed{contentBytes: 3}},
	{"kelvin sign folds to k", "{\"usage\":{\"prompt_to\u212aens\":4}}", false, parsed{hasUsage: true, usage: Usage{PromptTokens: 4}}},
	{"duplicate key: last wins", `{"choices":[{"delta":{"content":"abc","content":"d"}}]}`, false, parsed{contentBytes: 1}},
	{"float count", `{"usage":{"prompt_tokens":1.0}}`, false, parsed{}},
	{"escaped model", `{"model":"a\/b"}`, false, parsed{model: []byte("a/b")}},
}

func TestScanChunk(t *testing.T) {
	for _, tc := range scanCases {
		t.Run(tc.name, func(t *testing.T) {
			var fast parsed
			ok := scanChunk([]byte(tc.data), &fast)
			if ok != tc.fast {
				t.Fatalf("scanner decided = %v, want %v", ok, tc.fast)
			}
			got, err := parseChunk([]byte(tc.data), &chunk{})
			if err != nil && tc.name != "float count" {
				t.Fatalf("parseChunk: %v", err)
			}
			if err != nil {
				return // encoding/json rejects 1.0 for an int, and so do we
			}
			if string(got.model) != string(tc.want.model) || got.contentBytes != tc.want.contentBytes || got.finished != tc.want.finished ||
				got.hasUsage != tc.want.hasUsage || got.usage != tc.want.usage {
				t.Errorf("parsed = model %q bytes %d finished %v usage %v %+v, want model %q bytes %d finished %v usage %v %+v",
					got.model, got.contentBytes, got.finished, got.hasUsage, got.usage,
					tc.want.model, tc.want.contentBytes, tc.want.finished, tc.want.hasUsage, tc.want.usage)
			}
			checkEquivalent(t, []byte(tc.data))
		})
	}
}

func TestScanChunkRejectsInvalid(t *testing.T) {
	for _, data := range []string{
		``, `null`, `[]`, `{`, `{"choices":[}`, `{"choices":[{"delta":{"content":"x}}]}`, `{"a":tru}`, `{"a":01}`,
		`{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":"\x"}`, "{\"a\":\"\t\"}", `{"a":"\u12"}`, `{"a":1,}`, `{,"a":1}`,
		`{"a":1} x`, `{"choices":"x"}`, `{"choices":[{"delta":{"content":5}}]}`, `{"usage":{"prompt_tokens":"1"}}`,
		`{"model":5}`, `{"choices":[{"finish_reason":true}]}`, `{"usage":{"completion_tokens":12345678901234567890}}`,
		`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`,
	} {
		var p parsed
		if scanChunk([]byte(data), &p) {
			t.Errorf("scanner accepted %q", data)
		}
		checkEquivalent(t, []byte(data))
	}
}

// TestParseChunkJSONFreshChoices: encoding/json decodes into the slice
// elements it left behind; an OpenAI final chunk ("delta":{}) must not
// inherit the content of the chunk before it.
func TestParseChunkJSONFreshChoices(t *testing.T) {
	var c chunk
	if p, err := parseChunkJSON([]byte(`{"choices":[{"delta":{"content":"hello"}}]}`), &c); err != nil || p.contentBytes != 5 {
		t.Fatalf("first chunk: %+v %v", p, err)
	}
	p, err := parseChunkJSON([]byte(`{"choices":[{"delta":{},"finish_reason":"stop"}]}`), &c)
	if err != nil || p.contentBytes != 0 || !p.finished {
		t.Fatalf("final chunk: bytes %d finished %v err %v, want 0 true nil", p.contentBytes, p.finished, err)
	}
}

// checkEquivalent fails when the scanner decides data differently from
// encoding/json.
func checkEquivalent(t testing.TB, data []byte) {
	t.Helper()
	var fast parsed
	if !scanChunk(data, &fast) {
		return
	}
	slow, err := parseChunkJSON(data, &chunk{})
	if err != nil {
		t.Fatalf("scanner accepted %q, encoding/json rejects it: %v", data, err)
	}
	if string(fast.model) != string(slow.model) || fast.contentBytes != slow.contentBytes || fast.finished != slow.finished ||
		fast.hasUsage != slow.hasUsage || fast.usage != slow.usage || slow.err != nil || slow.sim != nil {
		t.Fatalf("%q: scanner model %q bytes %d finished %v usage %v %+v; encoding/json model %q bytes %d finished %v usage %v %+v err %v sim %v",
			data, fast.model, fast.contentBytes, fast.finished, fast.hasUsage, fast.usage,
			slow.model, slow.contentBytes, slow.finished, slow.hasUsage, slow.usage, slow.err, slow.sim)
	}
}

// FuzzScanChunk checks that whenever the scanner decides a chunk, it decides
// it exactly as encoding/json does.
func FuzzScanChunk(f *testing.F) {
	for _, tc := range scanCases {
		f.Add([]byte(tc.data))
	}
	f.Add([]byte(`{"choices":[{"delta":{"content":"\ud800\udc00\\u"}}],"usage":{"prompt_tokens":0,"completion_tokens":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkEquivalent(t, data)
	})
}
