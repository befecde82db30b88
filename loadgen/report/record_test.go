package report

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestInterTokenLatencies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offsets []time.Duration // after send
		tokens  []int32
		want    []float64
	}{
		{"one token per chunk", []time.Duration{10e6, 30e6, 40e6}, nil, []float64{0.020, 0.010}},
		{"k tokens spread over the gap", []time.Duration{10e6, 16e6, 40e6}, []int32{1, 3, 2}, []float64{0.002, 0.002, 0.002, 0.012, 0.012}},
		// Chunks 2 and 3 came in one read 20 ms after chunk 1: their two
		// tokens share the gap (10 ms each), none is 0.
		{"coalesced read", []time.Duration{10e6, 30e6, 30e6, 50e6}, nil, []float64{0.010, 0.010, 0.020}},
		{"coalesced with the first token: covered by TTFT", []time.Duration{10e6, 10e6, 30e6}, []int32{1, 1, 2}, []float64{0.010, 0.010}},
		{"empty chunks ignored", []time.Duration{10e6, 20e6, 30e6}, []int32{1, 0, 1}, []float64{0.020}},
		{"empty chunk in a coalesced read", []time.Duration{10e6, 16e6, 16e6, 40e6}, []int32{1, 3, 0, 2}, []float64{0.002, 0.002, 0.002, 0.012, 0.012}},
		{"single chunk", []time.Duration{10e6}, []int32{5}, nil},
		{"none", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Record{ChunkOffsets: tc.offsets, ChunkTokens: tc.tokens}
			got := slices.Collect(r.InterTokenLatencies())
			if len(got) != len(tc.want) {
				t.Fatalf("ITL = %v, want %v", got, tc.want)
			}
			for i := range got {
				if math.Abs(got[i]-tc.want[i]) > 1e-12 {
					t.Fatalf("ITL = %v, want %v", got, tc.want)
				}
			}
			// Stopping early works.
			for range r.InterTokenLatencies() {
				break
			}
		})
	}
}

// TestAnswerInterTokenLatencies: the answer's latencies leave the
// reasoning tokens out, a chunk that carried both counting its answer
// tokens only; the first answer group is covered by the time to the
// first answer token.
func TestAnswerInterTokenLatencies(t *testing.T) {
	r := &Record{ChunkOffsets: []time.Duration{10e6, 20e6, 40e6, 46e6, 60e6}, ChunkTokens: []int32{1, 1, 3, 2, 1},
		ChunkReasoningTokens: []int32{1, 1, 2, 0, 0}}
	// All tokens: 10 ms, then 20/3 ms ×3, 3 ms ×2, 14 ms.
	all := slices.Collect(r.InterTokenLatencies())
	if len(all) != 7 || math.Abs(all[1]-0.02/3) > 1e-12 {
		t.Errorf("ITL = %v", all)
	}
	// The answer: one token at 40 ms (its first), 2 at 46, 1 at 60.
	want := []float64{0.003, 0.003, 0.014}
	got := slices.Collect(r.AnswerInterTokenLatencies())
	if len(got) != len(want) {
		t.Fatalf("answer ITL = %v, want %v", got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("answer ITL = %v, want %v", got, want)
		}
	}
	// Without reasoning the answer's latencies are all of them.
	plain := &Record{ChunkOffsets: r.ChunkOffsets, ChunkTokens: r.ChunkTokens}
	if a, b := slices.Collect(plain.AnswerInterTokenLatencies()), slices.Collect(plain.InterTokenLatencies()); !slices.Equal(a, b) {
		t.Errorf("no reasoning: answer ITL %v, ITL %v", a, b)
	}
}

// TestFirstAnswer: a record written before reasoning was told apart (no
// first_answer_token_ns, no reasoning) began its answer with its first
// token; one that reasoned and never answered has no answer start.
func TestFirstAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Record
		want time.Duration
	}{
		{"old record", Record{FirstToken: 50}, 50},
		{"reasoned, then answered", Record{FirstToken: 50, FirstAnswerToken: 90, ChunkReasoningTokens: []int32{1, 0}}, 90},
		{"reasoned, no answer", Record{FirstToken: 50, ChunkReasoningTokens: []int32{1}}, 0},
		{"hidden reasoning counted, no answer", Record{ReasoningTokens: 30, OutputTokens: 30}, 0},
		{"nothing came", Record{}, 0},
	} {
		if got := tc.r.FirstAnswer(); got != tc.want {
			t.Errorf("%s: FirstAnswer = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := (&Record{OutputTokens: 10, ReasoningTokens: 7}).AnswerTokens(); n != 3 {
		t.Errorf("answer tokens %d, want 3", n)
	}
}

// records are one of each kind of request: completed, failed, cancelled at
// the end of the grace period, interrupted; together they set every
// field.
func records() []Record {
	return []Record{
		{Run: "rate=2 repeat=1", Level: 2, Repeat: 1, Index: 7, Intended: 10, Sent: 12, FirstByte: 40, FirstToken: 50, FirstAnswerToken: 72, End: 90, Status: 200,
			Model: "m", PromptTokens: 9, OutputTokens: 3, ReasoningTokens: 1, RequestedInputTokens: 8, RequestedOutputTokens: 3, UsageMismatch: true, KernelTimestamps: true,
			ChunkOffsets: []time.Duration{38, 60}, ChunkTokens: []int32{1, 2}, ChunkReasoningTokens: []int32{1, 0}, Sim: &SimTimestamps{ArrivalUnixNano: 1}, Answer: &Answer{PromptSHA256: "ab", Response: "yes"}},
		{Index: 8, Intended: 10, Sent: 11, FirstByte: 20, End: 21, Status: 503, ErrorClass: ErrHTTP5xx, Error: "HTTP 503: busy", PromptTokens: 4,
			Conversation: 2, Turn: 3, PrefixGroup: 2, PrefixTokens: 100, Images: 1, CachedTokens: new(0)},
		{Index: 9, Intended: 10, Sent: 11, FirstByte: 20, FirstToken: 30, End: 900, Status: 200, ErrorClass: ErrCancelledAtEnd,
			Error: "still in flight", PromptTokens: 4, OutputTokens: 1, TokensEstimated: true, ChunkOffsets: []time.Duration{19}, ChunkTokens: []int32{1}},
		{Index: 10, Intended: 10, Sent: 11, End: 500, ErrorClass: ErrInterrupted, Error: "context canceled", PromptTokens: 4},
	}
}

// TestRecordRoundTrip: every field of a record survives being embedded in
// a report and written to the per-request file, and read back (times to
// the nanosecond), under the JSON names of the report format; only the
// simulator's timestamps (Sim) and the answer (Answer, the saved-responses
// file's) are never written there. A field added to Record
// fails the test until a record here sets it.
func TestRecordRoundTrip(t *testing.T) {
	in := records()
	rt := reflect.TypeFor[Record]()
	var keys []string
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		set := false
		for j := range in {
			set = set || !reflect.ValueOf(in[j]).Field(i).IsZero()
		}
		if !set {
			t.Errorf("no record sets %s: the round trip does not cover it", f.Name)
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "-" {
			keys = append(keys, name)
		}
	}
	// The report format: these names, in this order, never renamed.
	want := "run level repeat index intended_ns sent_ns first_byte_ns first_token_ns first_answer_token_ns end_ns status error_class error model conversation turn " +
		"prompt_tokens output_tokens reasoning_tokens requested_input_tokens requested_output_tokens tokens_estimated usage_mismatch kernel_timestamps " +
		"chunk_offsets_ns chunk_tokens chunk_reasoning_tokens prefix_group prefix_tokens images cached_tokens"
	if got := strings.Join(keys, " "); got != want {
		t.Errorf("JSON names\n got %s\nwant %s", got, want)
	}
	var line map[string]any
	b, _ := json.Marshal(&in[0])
	if err := json.Unmarshal(b, &line); err != nil || line["intended_ns"] != 10.0 || line["chunk_offsets_ns"].([]any)[1] != 60.0 {
		t.Errorf("record 0 as JSON: %s (%v)", b, err)
	}
	exp := records()
	exp[0].Sim, exp[0].Answer = nil, nil // never written

	// Embedded in a report.
	doc := &Document{Runs: []Run{{Name: "r", Requests: in}}}
	data, err := doc.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(data, "test")
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Runs[0].Requests; !reflect.DeepEqual(got, exp) {
		t.Errorf("report round trip:\n got %+v\nwant %+v", got, exp)
	}
	// The per-request file.
	var buf bytes.Buffer
	if err := WriteRecords(&buf, in); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(in) {
		t.Errorf("%d lines for %d records", n, len(in))
	}
	got, err := ReadRecords(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("per-request file round trip:\n got %+v\nwant %+v", got, exp)
	}
	if _, err := ReadRecords(strings.NewReader("{\"index\":1}\n{oops\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad line: err = %v", err)
	}
	for i, r := range exp {
		if ok, intr := r.OK(), r.Interrupted(); ok != (i == 0) || intr != (i == 3) {
			t.Errorf("record %d: OK %v, Interrupted %v", i, ok, intr)
		}
	}
}
