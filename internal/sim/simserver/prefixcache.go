package simserver

import (
	"container/list"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// The prefix cache (Config.PrefixCacheTokens) models vLLM's automatic
// prefix caching: the prompt is cut into blocks of PrefixBlockTokens
// tokens (the tokens its usage counts, template and images included:
// prompt.go), each block known by a hash
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
