package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func fileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestLoadTraceFixtures(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		file    string
		opt     TraceOptions
		format  string
		want    []TraceRequest
		skipped int
	}{
		{
			file: "mooncake.jsonl", format: TraceMooncake,
			want: []TraceRequest{
				{Arrival: 0, InputTokens: 1100, OutputTokens: 12, HashIDs: []int64{0, 1, 2}, Line: 1},
				{Arrival: 0, InputTokens: 700, OutputTokens: 8, HashIDs: []int64{0, 3}, Line: 2},
				{Arrival: 250 * ms, InputTokens: 1500, OutputTokens: 20, HashIDs: []int64{0, 1, 4}, Line: 3},
				{Arrival: 1000 * ms, InputTokens: 300, OutputTokens: 5, HashIDs: []int64{5}, Line: 4},
			},
		},
		{
			// Times relative to 18:15:46.6805900; the row with 0 context
			// tokens (line 4) is skipped.
			file: "azure.csv", format: TraceAzure, skipped: 1,
			want: []TraceRequest{
				{Arrival: 0, InputTokens: 374, OutputTokens: 44, Line: 2},
				{Arrival: 4314579000, InputTokens: 396, OutputTokens: 109, Line: 3},
				{Arrival: 4800051000, InputTokens: 879, OutputTokens: 1, Line: 5},
				{Arrival: 5319410000, InputTokens: 91, OutputTokens: 16, Line: 6},
			},
		},
		{
			// Twice as fast, forced format.
			file: "azure.csv", opt: TraceOptions{Format: TraceAzure, Speedup: 2}, format: TraceAzure, skipped: 1,
			want: []TraceRequest{
				{Arrival: 0, InputTokens: 374, OutputTokens: 44, Line: 2},
				{Arrival: 2157289500, InputTokens: 396, OutputTokens: 109, Line: 3},
				{Arrival: 2400025500, InputTokens: 879, OutputTokens: 1, Line: 5},
				{Arrival: 2659705000, InputTokens: 91, OutputTokens: 16, Line: 6},
			},
		},
		{
			// Seconds from 5; the failed row (0 response tokens, line 5)
			// is skipped.
			file: "burstgpt.csv", format: TraceBurstGPT, skipped: 1,
			want: []TraceRequest{
				{Arrival: 0, InputTokens: 472, OutputTokens: 18, Line: 2},
				{Arrival: 40 * time.Second, InputTokens: 1087, OutputTokens: 230, Line: 3},
				{Arrival: 113 * time.Second, InputTokens: 417, OutputTokens: 276, Line: 4},
				{Arrival: 209 * time.Second, InputTokens: 185, OutputTokens: 215, Line: 6},
			},
		},
		{
			// The first two requests only; the hash still covers the file.
			file: "burstgpt.csv", opt: TraceOptions{MaxRequests: 2}, format: TraceBurstGPT,
			want: []TraceRequest{
				{Arrival: 0, InputTokens: 472, OutputTokens: 18, Line: 2},
				{Arrival: 40 * time.Second, InputTokens: 1087, OutputTokens: 230, Line: 3},
			},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			path := filepath.Join("testdata", tc.file)
			tr, err := LoadTrace(path, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			if tr.Format != tc.format || tr.Name != tc.file || tr.Skipped != tc.skipped || tr.SHA256 != fileSHA(t, path) {
				t.Errorf("format %q name %q skipped %d sha %s", tr.Format, tr.Name, tr.Skipped, tr.SHA256)
			}
			if !reflect.DeepEqual(tr.Requests, tc.want) {
				t.Errorf("requests\n got %+v\nwant %+v", tr.Requests, tc.want)
			}
			offs := tr.Offsets()
			for i, r := range tc.want {
				if offs[i] != r.Arrival {
					t.Errorf("offset %d = %v, want %v", i, offs[i], r.Arrival)
				}
			}
		})
	}
}

func TestParseTraceErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		opt        TraceOptions
		want       string
	}{
		{"missing field", `{"timestamp": 0, "input_length": 5}`, TraceOptions{}, `trace t: line 1: no "output_length" field`},
		{"fractional length", `{"timestamp": 0, "input_length": 1.5, "output_length": 2}`, TraceOptions{}, `trace t: line 1: input_length: "1.5" is not a non-negative integer`},
		{"negative timestamp", `{"timestamp": -1, "input_length": 1, "output_length": 2}`, TraceOptions{}, `line 1: timestamp "-1" is not a non-negative number`},
		{"bad json", "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 2}\n{\"timestamp\": 1,", TraceOptions{}, "trace t: line 2: unexpected EOF"},
		{"data after object", `{"timestamp": 0, "input_length": 1, "output_length": 2} x`, TraceOptions{}, "line 1: data after the JSON object"},
		{"bad hash id", `{"timestamp": 0, "input_length": 1, "output_length": 2, "hash_ids": [1, -3]}`, TraceOptions{}, `line 1: hash_ids[1] "-3" is not a non-negative integer`},
		{"out of order", "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 2}\n\n{\"timestamp\": 5, \"input_length\": 1, \"output_length\": 2}", TraceOptions{}, "trace t: line 3: timestamp 5 ms is before the previous row's 10 ms"},
		{"azure bad time", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,2\n", TraceOptions{}, `trace t: line 2: TIMESTAMP "yesterday": not a time like`},
		{"azure short row", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,1,2\n2023-11-16 18:15:47,1\n", TraceOptions{}, "trace t: line 3: 2 fields, the header has 3"},
		{"azure bad count", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,x,2\n", TraceOptions{}, `trace t: line 2: ContextTokens: "x" is not a non-negative integer`},
		{"azure out of order", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.5,1,2\n2023-11-16 18:15:46,1,2\n", TraceOptions{}, "line 3: timestamp 2023-11-16 18:15:46 is before the previous row's 2023-11-16 18:15:46.5"},
		{"burstgpt missing column", "Timestamp,Model,Request tokens,Total tokens,Log Type\n1,ChatGPT,3,4,API log\n", TraceOptions{}, `trace t: line 1: burstgpt header "Timestamp,Model,Request tokens,Total tokens,Log Type" has no "response tokens" column`},
		{"burstgpt bad time", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nsoon,ChatGPT,3,4,7,API log\n", TraceOptions{}, `trace t: line 2: Timestamp "soon": not a non-negative number of seconds`},
		{"csv quote", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,Chat\"GPT,3,4,7,API log\n", TraceOptions{}, "trace t: parse error on line 2"},
		{"unknown content", "hello,world\n", TraceOptions{}, "trace t: the first line is neither"},
		{"empty", "\n\n", TraceOptions{}, "trace t: empty file"},
		{"only skipped rows", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,3,0,3,API log\n", TraceOptions{}, "trace t: no requests (1 rows skipped for zero tokens)"},
		{"format forced wrong", "TIMESTAMP,ContextTokens,GeneratedTokens\n", TraceOptions{Format: TraceBurstGPT}, `has no "request tokens" column`},
		{"bad format option", "", TraceOptions{Format: "csv"}, `TraceFormat "csv": want mooncake, azure, burstgpt`},
		{"bad speed-up", "", TraceOptions{Speedup: -2}, "TraceSpeedup must be a positive number, got -2"},
		{"bad max requests", "", TraceOptions{MaxRequests: -1}, "TraceMaxRequests must not be negative, got -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrace(strings.NewReader(tc.body), "t", tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := LoadTrace(filepath.Join(t.TempDir(), "missing.jsonl"), TraceOptions{}); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing file: err = %v", err)
	}
}

func TestAzureTimeForms(t *testing.T) {
	base, err := parseAzureTime("2024-05-10 00:00:00")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"2024-05-10 00:00:00.0100000", "2024-05-10 00:00:00.01+00:00", "2024-05-10T00:00:00.010Z", "2024-05-10 02:00:00.01+02:00"} {
		got, err := parseAzureTime(s)
		if err != nil || got-base != int64(10*time.Millisecond) {
			t.Errorf("%s: %d ns after midnight, err %v; want 10 ms", s, got-base, err)
		}
	}
}

// commonWords is how many leading words a and b share.
func commonWords(a, b string) int {
	wa, wb := strings.Fields(a), strings.Fields(b)
	n := 0
	for n < len(wa) && n < len(wb) && wa[n] == wb[n] {
		n++
	}
	return n
}

func TestTracePrompts(t *testing.T) {
	tr, err := LoadTrace(filepath.Join("testdata", "mooncake.jsonl"), TraceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Seed: 4, Trace: tr, Nonce: "n1", Variant: "rate=3", MaxTokens: 10})
	reqs := make([]string, 5)
	for i := range reqs {
		r := w.Request(i)
		reqs[i] = r.Prompt
		tw := tr.Requests[i%4]
		if got := len(strings.Fields(r.Prompt)); got != tw.InputTokens || r.InputTokens != tw.InputTokens {
			t.Errorf("request %d: %d words, InputTokens %d, want %d", i, got, r.InputTokens, tw.InputTokens)
		}
		if want := min(tw.OutputTokens, 10); r.MaxTokens != want || r.Index != i {
			t.Errorf("request %d: max_tokens %d, want %d", i, r.MaxTokens, want)
		}
	}
	// The tag (1 word) then 512 words per hash id: requests 0 and 2 share
	// ids 0 and 1, requests 0 and 1 id 0, request 3 none.
	for _, c := range []struct{ a, b, want int }{{0, 2, 1 + 2*512}, {0, 1, 1 + 512}, {1, 2, 1 + 512}, {0, 3, 1}} {
		if got := commonWords(reqs[c.a], reqs[c.b]); got != c.want {
			t.Errorf("requests %d and %d share %d leading words, want %d", c.a, c.b, got, c.want)
		}
	}
	if reqs[4] != reqs[0] {
		t.Error("request 4 should replay row 0 (the trace cycles)")
	}
	tagged := strings.Fields(reqs[0])
	if tagged[1] != "h0" || strings.Contains(tagged[0], "-") {
		t.Errorf("prompt starts %q %q: want the run's tag then block h0", tagged[0], tagged[1])
	}
	// Another variant changes the tag only; another seed the blocks.
	other := New(Config{Seed: 4, Trace: tr, Nonce: "n1", Variant: "rate=6"}).Request(0).Prompt
	if commonWords(other, reqs[0]) != 0 || strings.SplitN(other, " ", 2)[1] != strings.SplitN(reqs[0], " ", 2)[1] {
		t.Error("a different variant must change the first word and nothing else")
	}
	if s := New(Config{Seed: 5, Trace: tr, Nonce: "n1", Variant: "rate=3"}).Request(0).Prompt; commonWords(s, reqs[0]) != 2 {
		t.Errorf("another seed shares %d words, want 2 (the tag and h0)", commonWords(s, reqs[0]))
	}
	// Without a tag the prompt starts with the first block.
	if p := New(Config{Seed: 4, Trace: tr}).Request(0).Prompt; !strings.HasPrefix(p, "h0 ") {
		t.Errorf("untagged prompt starts %q", p[:10])
	}

	// Without hash ids: the index leads, as for synthetic prompts.
	az, err := LoadTrace(filepath.Join("testdata", "azure.csv"), TraceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Seed: 1, Trace: az, IgnoreEOS: true}).Request(5)
	if f := strings.Fields(r.Prompt); f[0] != "5" || len(f) != 396 || r.MaxTokens != 109 || !r.IgnoreEOS {
		t.Errorf("azure request 5: first word %q, %d words, max_tokens %d", f[0], len(f), r.MaxTokens)
	}
}
