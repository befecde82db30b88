package client

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// scanCases are chunks as real servers send them, and odd ones. fast says
// whether the scanner must decide them itself (the hot shapes) or must
// hand them to encoding/json.
var scanCases = []struct {
	name, data string
	fast       bool
	want       parsed // compared on model, answerBytes, reasoningBytes, finished, usage
}{
	{"vllm chat", `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}`,
		true, parsed{model: []byte("m"), answerBytes: 5}},
	{"vllm role chunk", `{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
		true, parsed{model: []byte("m")}},
	{"vllm continuous usage", `{"model":"m","choices":[{"index":0,"delta":{"content":"ab"}}],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}}`,
		true, parsed{model: []byte("m"), answerBytes: 2, hasUsage: true, usage: Usage{PromptTokens: 7, CompletionTokens: 2}}},
	{"usage chunk", `{"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"prompt_tokens_details":null}}`,
		true, parsed{model: []byte("m"), hasUsage: true, usage: Usage{PromptTokens: 7, CompletionTokens: 4}}},
	{"openai final delta empty", `{"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
		true, parsed{finished: true}},
	{"tgi", `{"object":"chat.completion.chunk","id":"","created":1,"model":"tgi","system_fingerprint":"2.0","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],"usage":null}`,
		true, parsed{model: []byte("tgi"), answerBytes: 2}},
	{"llama.cpp timings", `{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"model":"gpt","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":3,"total_tokens":5},"timings":{"prompt_n":3,"prompt_ms":1.5e1,"predicted_per_second":-0.25}}`,
		true, parsed{model: []byte("gpt"), finished: true, hasUsage: true, usage: Usage{PromptTokens: 3, CompletionTokens: 2}}},
	{"completions text", `{"choices":[{"text":"xyz","index":0,"logprobs":{"tokens":["x"],"top_logprobs":[{"x":-0.1}]},"finish_reason":"length"}]}`,
		true, parsed{answerBytes: 3, finished: true}},
	{"reasoning", `{"choices":[{"delta":{"reasoning_content":"abc","reasoning":"de","content":null}}]}`,
		true, parsed{reasoningBytes: 5}},
	{"vllm reasoning (new name)", `{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"reasoning":"Okay"},"logprobs":null,"finish_reason":null}]}`,
		true, parsed{model: []byte("m"), reasoningBytes: 4}},
	{"vllm boundary delta: reasoning and content", `{"choices":[{"index":0,"delta":{"reasoning":" so","content":"Yes"}}]}`,
		true, parsed{reasoningBytes: 3, answerBytes: 3}},
	{"both names, same text: once", `{"choices":[{"delta":{"reasoning":"abc","reasoning_content":"abc"}}]}`,
		true, parsed{reasoningBytes: 3}},
	{"ollama reasoning with empty content", `{"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning":"Hmm"},"finish_reason":null}]}`,
		true, parsed{model: []byte("qwen3"), reasoningBytes: 3}},
	{"openai reasoning count", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":30,"total_tokens":39,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":24,"audio_tokens":0}}}`,
		true, parsed{hasUsage: true, usage: Usage{PromptTokens: 9, CompletionTokens: 30, PromptTokensDetails: PromptTokensDetails{CachedTokens: OptInt{Set: true}}, ReasoningTokens: 24, Reasoning: true}}},
	{"cached and reasoning counts together", `{"usage":{"completion_tokens_details":{"reasoning_tokens":12},"prompt_tokens":40,"prompt_tokens_details":{"cached_tokens":32},"reasoning_tokens":1,"completion_tokens":20}}`,
		true, parsed{hasUsage: true, usage: Usage{PromptTokens: 40, CompletionTokens: 20, PromptTokensDetails: PromptTokensDetails{CachedTokens: OptInt{V: 32, Set: true}}, ReasoningTokens: 12, Reasoning: true}}},
	{"sglang reasoning count", `{"choices":[],"usage":{"prompt_tokens":9,"total_tokens":39,"completion_tokens":30,"prompt_tokens_details":null,"reasoning_tokens":20,"completion_tokens_details":null}}`,
		true, parsed{hasUsage: true, usage: Usage{PromptTokens: 9, CompletionTokens: 30, ReasoningTokens: 20, Reasoning: true}}},
	{"details count before the top-level one", `{"usage":{"reasoning_tokens":3,"completion_tokens_details":{"reasoning_tokens":5},"completion_tokens":8}}`,
		true, parsed{hasUsage: true, usage: Usage{CompletionTokens: 8, ReasoningTokens: 5, Reasoning: true}}},
	{"null details count: the top-level one", `{"usage":{"reasoning_tokens":3,"completion_tokens_details":{"reasoning_tokens":null,"x":[1]},"completion_tokens":8}}`,
		true, parsed{hasUsage: true, usage: Usage{CompletionTokens: 8, ReasoningTokens: 3, Reasoning: true}}},
	{"escapes and utf-8", `{"choices":[{"delta":{"content":"a\nb\"\u00e9\ud83d\ude00é"}}]}`,
		true, parsed{answerBytes: 1 + 1 + 1 + 1 + 2 + 4 + 2}},
	{"unpaired surrogates", `{"choices":[{"delta":{"content":"\ud83d\u0041\ude00"}}]}`,
		true, parsed{answerBytes: 3 + 1 + 3}},
	{"invalid utf-8 replaced", "{\"choices\":[{\"delta\":{\"content\":\"a\xffb\"}}]}",
		true, parsed{answerBytes: 1 + 3 + 1}},
	{"whitespace", " {\n \"choices\" : [ { \"delta\" : { \"content\" : \"x\" } } , null ] } \r\n",
		true, parsed{answerBytes: 1}},
	{"null everywhere", `{"model":null,"choices":[{"delta":null,"text":null,"finish_reason":null}],"usage":null,"error":null,"gpulens_sim":null}`,
		true, parsed{}},
	{"usage null counts", `{"usage":{"prompt_tokens":null,"completion_tokens":-0}}`, true, parsed{hasUsage: true}},

	{"error object", `{"error":{"message":"overloaded","code":503}}`, false, parsed{}},
	{"sim timestamps", `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1},"gpulens_sim":{"arrival_unix_nano":1,"first_token_unix_nano":2,"token_unix_nanos":[2]}}`,
		true, parsed{hasUsage: true, usage: Usage{PromptTokens: 1, CompletionTokens: 1}}},
	{"sim timestamps as the simulator writes them", `{"id":"chatcmpl-sim-7","object":"chat.completion.chunk","created":1796030589,"model":"gpulens-sim","choices":[],` +
		`"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2},"gpulens_sim":{"request_seq":7,"arrival_unix_nano":1796030589190983158,` +
		`"first_token_unix_nano":1796030589211450652,"token_unix_nanos":[1796030589211450652,1796030589213162027],"chunk_unix_nanos":[ 1796030589211911080 , -9223372036854775808 ]}}`,
		true, parsed{model: []byte("gpulens-sim"), hasUsage: true, usage: Usage{PromptTokens: 9, CompletionTokens: 2}}},
	{"sim timestamps, empty and null arrays", `{"gpulens_sim":{"arrival_unix_nano":9223372036854775807,"token_unix_nanos":[],"chunk_unix_nanos":null,"first_token_unix_nano":null}}`,
		true, parsed{}},
	{"sim timestamp out of range", `{"gpulens_sim":{"arrival_unix_nano":9223372036854775808}}`, false, parsed{}},
	{"sim timestamp null element", `{"gpulens_sim":{"token_unix_nanos":[1,null]}}`, false, parsed{}},
	{"case-folded key", `{"choices":[{"delta":{"Content":"abc"}}]}`, false, parsed{answerBytes: 3}},
	{"escaped key", `{"choices":[{"delta":{"cont\u0065nt":"abc"}}]}`, false, parsed{answerBytes: 3}},
	{"kelvin sign folds to k", "{\"usage\":{\"prompt_to\u212aens\":4}}", false, parsed{hasUsage: true, usage: Usage{PromptTokens: 4}}},
	{"duplicate key: last wins", `{"choices":[{"delta":{"content":"abc","content":"d"}}]}`, false, parsed{answerBytes: 1}},
	{"float count", `{"usage":{"prompt_tokens":1.0}}`, false, parsed{}},
	{"both reasoning names, escaped", `{"choices":[{"delta":{"reasoning":"a\u0062","reasoning_content":"ab"}}]}`, false, parsed{reasoningBytes: 2}},
	{"both reasoning names, different", `{"choices":[{"delta":{"reasoning":"a\n","reasoning_content":"ab"}}]}`, false, parsed{reasoningBytes: 4}},
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
			if err != nil && tc.name != "float count" && tc.name != "sim timestamp out of range" {
				t.Fatalf("parseChunk: %v", err)
			}
			if err != nil {
				return // encoding/json rejects 1.0 for an int, and so do we
			}
			if string(got.model) != string(tc.want.model) || got.answerBytes != tc.want.answerBytes || got.reasoningBytes != tc.want.reasoningBytes ||
				got.finished != tc.want.finished || got.hasUsage != tc.want.hasUsage || got.usage != tc.want.usage {
				t.Errorf("parsed = model %q bytes %d+%d finished %v usage %v %+v, want model %q bytes %d+%d finished %v usage %v %+v",
					got.model, got.answerBytes, got.reasoningBytes, got.finished, got.hasUsage, got.usage,
					tc.want.model, tc.want.answerBytes, tc.want.reasoningBytes, tc.want.finished, tc.want.hasUsage, tc.want.usage)
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
		`{"usage":{"completion_tokens_details":5}}`, `{"usage":{"completion_tokens_details":{"reasoning_tokens":"5"}}}`,
		`{"usage":{"reasoning_tokens":1.5}}`, `{"choices":[{"delta":{"reasoning":5}}]}`,
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
	if p, err := parseChunkJSON([]byte(`{"choices":[{"delta":{"content":"hello"}}]}`), &c); err != nil || p.answerBytes != 5 {
		t.Fatalf("first chunk: %+v %v", p, err)
	}
	p, err := parseChunkJSON([]byte(`{"choices":[{"delta":{},"finish_reason":"stop"}]}`), &c)
	if err != nil || p.answerBytes != 0 || !p.finished {
		t.Fatalf("final chunk: bytes %d finished %v err %v, want 0 true nil", p.answerBytes, p.finished, err)
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
	if string(fast.model) != string(slow.model) || fast.answerBytes != slow.answerBytes || fast.reasoningBytes != slow.reasoningBytes ||
		fast.finished != slow.finished || fast.hasUsage != slow.hasUsage || fast.usage != slow.usage || slow.err != nil ||
		!reflect.DeepEqual(fast.sim, slow.sim) {
		t.Fatalf("%q: scanner model %q bytes %d+%d finished %v usage %v %+v; encoding/json model %q bytes %d+%d finished %v usage %v %+v err %v sim %v",
			data, fast.model, fast.answerBytes, fast.reasoningBytes, fast.finished, fast.hasUsage, fast.usage,
			slow.model, slow.answerBytes, slow.reasoningBytes, slow.finished, slow.hasUsage, slow.usage, slow.err, slow.sim)
	}
	if fast.sim != nil && fast.sim == slow.sim {
		t.Fatal("shared sim timestamps")
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

// BenchmarkSimChunk decodes the last chunk of a 64-token stream from the
// simulator (usage and gpulens_sim, as the accuracy benchmark gets once
// per request): with the scanner, and with encoding/json, which decoded
// it before the scanner knew gpulens_sim.
func BenchmarkSimChunk(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"id":"chatcmpl-sim-7","object":"chat.completion.chunk","created":1796030589,"model":"gpulens-sim","choices":[],` +
		`"usage":{"prompt_tokens":9,"total_tokens":73,"completion_tokens":64},"gpulens_sim":{"request_seq":7,"arrival_unix_nano":1796030589190983158,` +
		`"first_token_unix_nano":1796030589211450652`)
	for _, k := range []string{"token_unix_nanos", "chunk_unix_nanos"} {
		sb.WriteString(`,"` + k + `":[`)
		for i := range 64 {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(strconv.FormatInt(1796030589211450652+int64(i)*5_000_123, 10))
		}
		sb.WriteByte(']')
	}
	sb.WriteString("}}")
	data := []byte(sb.String())
	var c chunk
	if p, err := parseChunk(data, &c); err != nil || p.sim == nil || len(p.sim.ChunkUnixNanos) != 64 || !scanChunk(data, &parsed{}) {
		b.Fatalf("chunk not decoded by the scanner: %v %+v", err, p)
	}
	b.Run("scanner", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var p parsed
			scanChunk(data, &p)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseChunkJSON(data, &c); err != nil {
				b.Fatal(err)
			}
		}
	})
}
