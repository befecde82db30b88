package simserver

import (
	"bytes"
	"container/list"
	"encoding/json"
	"hash"
	"hash/fnv"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// The prefix cache (Config.PrefixCacheTokens) models vLLM's automatic
// prefix caching: the prompt is cut into blocks of PrefixBlockTokens
// tokens (words, as the simulator counts them), each block known by a hash
// of the whole prompt up to its end, so that a block matches only when
// everything before it matches too. When a request is admitted, the
// leading blocks found in the cache are its cached tokens, except that at
// least one token is always computed (a prompt cached whole recomputes its
// last block, as vLLM does); its prefill costs PrefillPerToken for the
// other tokens only (batching mode). Then every full block of the prompt
// is put in the cache, which holds at most PrefixCacheTokens tokens and
// forgets the least recently used blocks first; a prompt's blocks are
// touched from last to first, so its tail goes before its head. Output
// tokens are not cached.

// DefaultPrefixBlockTokens is Config.PrefixBlockTokens when it is zero:
// vLLM's default block size.
const DefaultPrefixBlockTokens = 16

// prefixCache is an LRU set of block hashes. It belongs to the scheduler
// goroutine.
type prefixCache struct {
	capacity int       // blocks
	lru      list.List // of uint64 hashes, most recently used first
	index    map[uint64]*list.Element
}

func newPrefixCache(blocks int) *prefixCache {
	return &prefixCache{capacity: max(blocks, 1), index: map[uint64]*list.Element{}}
}

// admit returns how many leading blocks of a prompt are cached, then
// caches every block of it.
func (c *prefixCache) admit(blocks []uint64) int {
	hit := 0
	for hit < len(blocks) {
		if _, ok := c.index[blocks[hit]]; !ok {
			break
		}
		hit++
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		h := blocks[i]
		if e, ok := c.index[h]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.index[h] = c.lru.PushFront(h)
		for c.lru.Len() > c.capacity {
			old := c.lru.Back()
			c.lru.Remove(old)
			delete(c.index, old.Value.(uint64))
		}
	}
	return hit
}

// cachedTokens looks r's prompt up in the prefix cache, caches it, records
// the query in the metrics and returns how many of its tokens were cached.
func (e *engine) cachedTokens(r *request) int {
	if e.prefix == nil || r.promptTokens == 0 {
		return 0
	}
	b := e.cfg.PrefixBlockTokens
	hit := e.prefix.admit(r.blocks)
	cached := min(hit, (r.promptTokens-1)/b) * b
	e.metrics.prefixQueries.Add(float64(r.promptTokens))
	e.metrics.prefixHits.Add(float64(cached))
	return cached
}

// promptBlocks returns the hashes of the full blocks of a request's prompt
// (every message's content in order for chat), or nil without a prefix
// cache.
func (s *Server) promptBlocks(req *generateRequest, chat bool) []uint64 {
	if s.cfg.PrefixCacheTokens == 0 {
		return nil
	}
	if !chat {
		return hashBlocks([]json.RawMessage{req.Prompt}, s.cfg.PrefixBlockTokens)
	}
	contents := make([]json.RawMessage, 0, len(req.Messages))
	for _, m := range req.Messages {
		var msg struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &msg) == nil {
			contents = append(contents, msg.Content)
		}
	}
	return hashBlocks(contents, s.cfg.PrefixBlockTokens)
}

// hashBlocks returns, for every full block of size words of the contents
// taken in order (the words countPromptTokens counts), the hash of all the
// words up to the block's end.
func hashBlocks(contents []json.RawMessage, size int) []uint64 {
	bh := blockHasher{size: size, h: fnv.New64a()}
	for _, c := range contents {
		walkWords(c, bh.word)
	}
	return bh.blocks
}

// blockHasher hashes a stream of words and records the running hash at the
// end of every full block.
type blockHasher struct {
	size   int
	n      int
	h      hash.Hash64
	blocks []uint64
}

func (b *blockHasher) word(w []byte) {
	_, _ = b.h.Write(w)
	_, _ = b.h.Write([]byte{0})
	b.n++
	if b.n%b.size == 0 {
		b.blocks = append(b.blocks, b.h.Sum64())
	}
}

// walkWords calls fn with every word of a message content or prompt (what
// countPromptTokens counts): whitespace-separated words of a string,
// of an array of strings or of content parts' "text", and each token id
// of an array of ids (its decimal text).
func walkWords(raw json.RawMessage, fn func([]byte)) {
	walkWordsOrIDs(raw, func(w []byte, _ bool) { fn(w) })
}

// walkWordsOrIDs is walkWords telling a token id (id true) from a word.
func walkWordsOrIDs(raw json.RawMessage, fn func(w []byte, id bool)) {
	word := func(w []byte) { fn(w, false) }
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			fields([]byte(s), word)
		}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return
		}
		for _, it := range items {
			it = bytes.TrimSpace(it)
			switch {
			case len(it) == 0:
			case it[0] == '{':
				var part struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(it, &part) == nil {
					fields([]byte(part.Text), word)
				}
			case it[0] == '"' || it[0] == '[':
				walkWordsOrIDs(it, fn)
			default:
				fn(it, true) // a token id
			}
		}
	}
}

// fields calls fn with every whitespace-separated word of s, as
// bytes.Fields splits it, without allocating.
func fields(s []byte, fn func([]byte)) {
	start := -1
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(s[i:])
		}
		if unicode.IsSpace(r) {
			if start >= 0 {
				fn(s[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += size
	}
	if start >= 0 {
		fn(s[start:])
	}
}

// prefixMetrics are the prefix cache's vLLM-named counters, and vLLM's
// preemption counter (the simulator never preempts: it stays 0, present
// as on vLLM).
func prefixMetrics(labels prometheus.Labels) (queries, hits, preemptions prometheus.Counter) {
	queries = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_queries_total", ConstLabels: labels,
		Help: "Prefix cache queries, in terms of number of queried tokens."})
	hits = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prefix_cache_hits_total", ConstLabels: labels,
		Help: "Prefix cache hits, in terms of number of cached tokens."})
	preemptions = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:num_preemptions_total", ConstLabels: labels,
		Help: "Cumulative number of preemptions from the engine."})
	return queries, hits, preemptions
}
