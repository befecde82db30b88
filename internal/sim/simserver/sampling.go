package simserver

import (
	"hash/fnv"
	"math/rand/v2"
)

// answerRand is the source of a request's answer (its length and words)
// when a real server's would be fixed: temperature 0 is greedy decoding,
// whose answer follows from the prompt alone, and a seed fixes sampling,
// whose answer then follows from the prompt and the seed. Otherwise nil:
// the answer is drawn per request, as sampling at a temperature does.
// The model and the prompt (the messages or the prompt as sent) make the
// key, so that the same prompt gets the same answer in every run.
func answerRand(req *generateRequest) *rand.Rand {
	greedy := req.Temperature != nil && *req.Temperature == 0
	if !greedy && req.Seed == nil {
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte(req.Model))
	for _, m := range req.Messages {
		h.Write([]byte{0})
		h.Write(m)
	}
	h.Write([]byte{1})
	h.Write(req.Prompt)
	var seed uint64
	if !greedy {
		seed = uint64(*req.Seed)
	}
	return rand.New(rand.NewPCG(h.Sum64(), seed))
}
