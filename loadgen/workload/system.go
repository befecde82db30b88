package workload

import (
	"math/rand/v2"
	"strings"
)

// SystemPrompt is a generated system prompt of words words of the
// synthetic vocabulary (one token each in the widespread tokenizers; a
// calibration says how many the server counts), drawn with the seed from
// a stream of their own: the same seed and length give the same text, and
// a longer one starts with a shorter one's words.
func SystemPrompt(seed int64, words int) string {
	rng := rand.New(rand.NewPCG(uint64(seed)^0x5e57e4, 0x5157))
	var sb strings.Builder
	sb.Grow(words * 6)
	appendWords(&sb, rng, 0, words)
	return sb.String()
}
