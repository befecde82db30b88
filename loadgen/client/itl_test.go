package client

import (
	"math"
	"slices"
	"testing"
)

func TestInterTokenLatencies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		offsets []int64 // ns after send
		tokens  []int32
		want    []float64
	}{
		{"one token per chunk", []int64{10e6, 30e6, 40e6}, nil, []float64{0.020, 0.010}},
		{"k tokens spread over the gap", []int64{10e6, 16e6, 40e6}, []int32{1, 3, 2}, []float64{0.002, 0.002, 0.002, 0.012, 0.012}},
		// Chunks 2 and 3 came in one read 20 ms after chunk 1: their two
		// tokens share the gap (10 ms each), none is 0.
		{"coalesced read", []int64{10e6, 30e6, 30e6, 50e6}, nil, []float64{0.010, 0.010, 0.020}},
		{"coalesced with the first token: covered by TTFT", []int64{10e6, 10e6, 30e6}, []int32{1, 1, 2}, []float64{0.010, 0.010}},
		{"empty chunks ignored", []int64{10e6, 20e6, 30e6}, []int32{1, 0, 1}, []float64{0.020}},
		{"single chunk", []int64{10e6}, []int32{5}, nil},
		{"none", nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Result{ChunkOffsets: tc.offsets, ChunkTokens: tc.tokens}
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
