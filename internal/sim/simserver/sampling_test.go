package simserver

import (
	"encoding/json"
	"testing"
	"time"
)

// TestSamplingDeterminism: as a real server, the simulator answers the
// same prompt the same way every time at temperature 0 (greedy: whatever
// the seed) and with the same seed; with another seed, another prompt or
// neither, the answer is drawn per request.
func TestSamplingDeterminism(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 9, FixedTTFT: time.Microsecond, OutputTokensMean: 20})
	answer := func(extra string) string {
		t.Helper()
		resp, body := post(t, url+"/v1/chat/completions", chatBody(`,"max_tokens":40,"stream":false`+extra))
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		var got struct {
			Choices []struct{ Message struct{ Content string } }
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		return got.Choices[0].Message.Content
	}
	greedy := answer(`,"temperature":0`)
	seeded := answer(`,"temperature":0.8,"seed":11`)
	var free []string
	for range 4 {
		if a := answer(``); a != "" {
			free = append(free, a)
		}
		if a := answer(`,"temperature":0,"seed":5`); a != greedy {
			t.Errorf("temperature 0: %q, then %q", greedy, a)
		}
		if a := answer(`,"temperature":0.8,"seed":11`); a != seeded {
			t.Errorf("seed 11: %q, then %q", seeded, a)
		}
	}
	if answer(`,"seed":12`) == seeded {
		t.Errorf("seeds 11 and 12 gave the same answer %q", seeded)
	}
	distinct := map[string]bool{}
	for _, a := range free {
		distinct[a] = true
	}
	if len(distinct) < 2 {
		t.Errorf("without temperature 0 or a seed, four requests got %d answer(s): %q", len(distinct), free)
	}
	// Another prompt, greedy: another answer.
	resp, body := post(t, url+"/v1/chat/completions", `{"model":"gpulens-sim","messages":[{"role":"user","content":"other words"}],"max_tokens":40,"stream":false,"temperature":0}`)
	if resp.StatusCode != 200 || json.Valid(body) && string(body) == "" {
		t.Fatalf("status %d", resp.StatusCode)
	}
	var other struct {
		Choices []struct{ Message struct{ Content string } }
	}
	_ = json.Unmarshal(body, &other)
	if other.Choices[0].Message.Content == greedy {
		t.Errorf("two prompts got the same greedy answer %q", greedy)
	}
}
