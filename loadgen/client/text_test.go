package client

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDoText: DoText returns the answer's text (escapes decoded, split
// chunks joined, reasoning apart), its finish reason, and the same record
// as Do.
func TestDoText(t *testing.T) {
	for _, tc := range []struct {
		name, endpoint, body string
		want                 Text
		class                string
	}{
		{"chat", EndpointChat,
			`data: {"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n" +
				`data: {"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"think \"hard\""}}]}` + "\n\n" +
				`data: {"model":"m","choices":[{"index":0,"delta":{"content":"Paris\n"}}]}` + "\n\n" +
				`data: {"model":"m","choices":[{"index":0,"delta":{"content":"caf\u00e9 \ud83d\ude00"},"finish_reason":null}]}` + "\n\n" +
				`data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n" +
				`data: {"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":4}}` + "\n\ndata: [DONE]\n\n",
			Text{Content: "Paris\ncafé 😀", Reasoning: `think "hard"`, FinishReason: "length"}, ""},
		{"completions", EndpointCompletions,
			`data: {"model":"m","choices":[{"index":0,"text":"4","finish_reason":null}]}` + "\n\n" +
				`data: {"model":"m","choices":[{"index":0,"text":"2","finish_reason":"stop"}]}` + "\n\n" +
				`data: {"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\ndata: [DONE]\n\n",
			Text{Content: "42", FinishReason: "stop"}, ""},
		{"cut mid-stream", EndpointChat,
			`data: {"model":"m","choices":[{"index":0,"delta":{"content":"half an "}}]}` + "\n\n" +
				`data: {"model":"m","choices":[{"index":0,"delta":{"content":"answer"}}]}` + "\n\n",
			Text{Content: "half an answer"}, "stream_broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: tc.endpoint, Model: "m", Timeout: time.Minute,
				Transport: memTransport{[]byte(tc.body)}})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			rec, text := c.DoText(context.Background(), Request{Index: 3, Prompt: "x"}, start, start)
			if text != tc.want {
				t.Errorf("text %+v, want %+v", text, tc.want)
			}
			if rec.ErrorClass != tc.class || rec.Index != 3 {
				t.Errorf("record %+v, want error class %q", rec, tc.class)
			}
			// The same record as Do's, times apart.
			plain := c.Do(context.Background(), Request{Index: 3, Prompt: "x"}, start, start)
			for _, r := range []*struct{ a, b *time.Duration }{{&rec.Sent, &plain.Sent}, {&rec.FirstByte, &plain.FirstByte},
				{&rec.FirstToken, &plain.FirstToken}, {&rec.FirstAnswerToken, &plain.FirstAnswerToken}, {&rec.End, &plain.End}, {&rec.Intended, &plain.Intended}} {
				*r.a, *r.b = 0, 0
			}
			rec.ChunkOffsets, plain.ChunkOffsets = nil, nil
			if !reflect.DeepEqual(rec, plain) {
				t.Errorf("DoText record %+v\nDo record     %+v", rec, plain)
			}
		})
	}
}

// TestDoKeepsNoText: Do decodes no text (its scanner only counts bytes)
// and allocates no more than it did for a streamed answer of any length.
func TestDoKeepsNoText(t *testing.T) {
	body := func(n int) []byte {
		var sb strings.Builder
		for range n {
			sb.WriteString(`data: {"model":"m","choices":[{"index":0,"delta":{"content":" word"}}]}` + "\n\n")
		}
		sb.WriteString(`data: {"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":` +
			strconv.Itoa(n) + `}}` + "\n\ndata: [DONE]\n\n")
		return []byte(sb.String())
	}
	allocs := func(n int, text bool) float64 {
		c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Minute,
			Transport: memTransport{body(n)}})
		if err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(20, func() {
			if text {
				c.DoText(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
			} else {
				c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
			}
		})
	}
	// Do's allocations grow only with the chunk bookkeeping (offsets and
	// token counts: slices that double), not per chunk; DoText's grow
	// with every chunk decoded.
	short, long := allocs(64, false), allocs(512, false)
	if long-short > 16 {
		t.Errorf("Do: %v allocations for 64 chunks, %v for 512: it allocates per chunk", short, long)
	}
	if ts, tl := allocs(64, true), allocs(512, true); tl-ts < 448 {
		t.Errorf("DoText: %v allocations for 64 chunks, %v for 512: want at least one more per chunk (it decodes the text)", ts, tl)
	}
}
