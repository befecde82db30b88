package simserver

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// request is one generation. The fields above mu are set by the handler
// before the request reaches the scheduler and never change; the fields
// below "scheduler-owned" belong to the scheduler goroutine; mu guards the
// token times and the finished flag shared with the handler.
type request struct {
	seq          uint64
	arrival      time.Time
	promptTokens int
	target       int  // output tokens to produce
	lengthCapped bool // target hit max_tokens: finish_reason "length"
	reasoning    int  // the first output tokens that are reasoning (reasoning.go)
	kv           int  // KV-cache tokens reserved while running
	wordOffset   int
	stallAt      int // stall before producing token stallAt (0-based); -1: never
	disconnectAt int // abort the stream once this many tokens were written; -1: never
	rng          *rand.Rand
	// blocks are the hashes of the prompt's full blocks (prefix cache).
	blocks []uint64

	// gone is set by the handler when its client went away (or it aborted
	// on purpose); the scheduler then drops the request.
	gone   atomic.Bool
	notify chan struct{} // capacity 1: "new tokens or finished"

	// scheduler-owned
	produced   int
	due        time.Time // fixed mode: when the next token is due
	heapIndex  int
	runIndex   int
	stalled    bool // the stall was applied
	stallUntil time.Time
	inStep     bool
	lastToken  time.Time
	cached     int // prompt tokens served by the prefix cache
	// probeMark is the engine's probeSteps when the request arrived (less
	// one when it arrived during a step the probe slowed); probeHit is set
	// when a token delay of its (fixed mode) was stretched by the probe.
	probeMark uint64
	probeHit  bool

	mu       sync.Mutex
	times    []int64 // unix nanoseconds at which each token was produced
	finished bool
	// served is cached, published for the handler's usage once the
	// request was admitted.
	served int
}

// servedTokens returns the prompt tokens the prefix cache served (0
// before the request was admitted).
func (r *request) servedTokens() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.served
}

// snapshot returns the tokens produced so far and whether the request is
// finished. The returned slice is append-only: its elements never change.
func (r *request) snapshot() ([]int64, bool) {
	r.mu.Lock()
	t, f := r.times, r.finished
	r.mu.Unlock()
	return t, f
}

// draws fills the request's seeded random decisions. They depend only on
// the seed and the request's sequence number, in a fixed order, so the n-th
// request always gets the same ones.
// answer, when not nil, draws the answer instead (its length and words):
// a request decoded greedily or with a seed (sampling.go).
func (r *request) draw(cfg *Config, maxTokens int, ignoreEOS bool, answer *rand.Rand) (fail bool) {
	rng := r.rng
	fail = rng.Float64() < cfg.ErrorRate
	u := rng.Float64()
	if answer != nil {
		u = answer.Float64()
	}
	n := geometric(u, cfg.OutputTokensMean)
	if ignoreEOS || n >= maxTokens {
		n = maxTokens
		r.lengthCapped = true
	}
	r.target = n
	r.wordOffset = rng.IntN(len(words))
	if answer != nil {
		r.wordOffset = answer.IntN(len(words))
	}
	r.stallAt, r.disconnectAt = -1, -1
	stall, stallAt := rng.Float64() < cfg.StallRate, rng.IntN(n)
	if stall && cfg.StallDuration > 0 {
		r.stallAt = stallAt
	}
	disc, discAt := rng.Float64() < cfg.DisconnectRate, rng.IntN(n)
	if disc {
		r.disconnectAt = discAt
	}
	r.kv = r.promptTokens + r.target
	return fail
}

// geometric maps u ∈ [0,1) to a length ≥ 1 with mean ≈ mean: the number of
// tokens until an end-of-sequence token of probability 1/mean.
func geometric(u float64, mean int) int {
	if mean <= 1 {
		return 1
	}
	p := 1 / float64(mean)
	n := 1 + int(math.Floor(math.Log1p(-u)/math.Log1p(-p)))
	if n < 1 {
		n = 1
	}
	return n
}

// jitter scales d by a factor in [1−j, 1+j] drawn from rng.
func jitter(rng *rand.Rand, d time.Duration, j float64) time.Duration {
	if j == 0 || d == 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + j*(2*rng.Float64()-1)))
}

// engine is the scheduler state: a FIFO of waiting requests and the running
// set, advanced by the scheduler goroutine (or directly by tests) with the
// current time. It never sleeps.
type engine struct {
	cfg     *Config
	fixed   bool
	rng     *rand.Rand // step jitter (batching mode)
	metrics *metrics
	queued  *atomic.Int64 // requests received but not admitted yet

	waiting []*request
	running []*request
	heap    dueHeap
	kvUsed  int
	prefix  *prefixCache // nil: no prefix cache

	inStep  bool
	stepEnd time.Time
	stepLen time.Duration
	// probeSteps counts the steps that began while the tied GPU's probe
	// slowed them (slowdown.probe); stepProbe: the current one did.
	probeSteps uint64
	stepProbe  bool

	// slowdown stretches every step (batching) and token delay (fixed
	// mode): the share of the GPU's time neighbours take (SetSlowdown). Nil
	// is 1.
	slowdown *slowdown

	wake []*request // handlers to notify at the end of advance
}

// stretch scales d by the current slowdown.
func (e *engine) stretch(d time.Duration) time.Duration {
	if e.slowdown == nil {
		return d
	}
	if f := e.slowdown.get(); f != 1 {
		return time.Duration(float64(d) * f)
	}
	return d
}

func newEngine(cfg *Config, m *metrics, queued *atomic.Int64) *engine {
	e := &engine{
		cfg:     cfg,
		fixed:   cfg.Fixed(),
		rng:     rand.New(rand.NewPCG(cfg.Seed, math.MaxUint64)),
		metrics: m,
		queued:  queued,
	}
	if cfg.PrefixCacheTokens > 0 {
		e.prefix = newPrefixCache(cfg.PrefixCacheTokens / cfg.PrefixBlockTokens)
	}
	return e
}

func (e *engine) enqueue(r *request) {
	r.probeMark = e.probeSteps
	if e.inStep && e.stepProbe && r.arrival.Before(e.stepEnd) {
		r.probeMark-- // it waits for a step the probe slowed
	}
	e.waiting = append(e.waiting, r)
}

// probing says whether the tied GPU's probe slows what starts now.
func (e *engine) probing() bool { return e.slowdown != nil && e.slowdown.probe.Load() }

// probed says whether the probe slowed r so far: a step that ran while r
// waited or ran, or one of its token delays (fixed mode).
func (e *engine) probed(r *request) bool { return r.probeHit || e.probeSteps > r.probeMark }

// admit moves waiting requests into the running set, in FIFO order, while
// the batch and the KV cache have room. It returns how many it admitted.
func (e *engine) admit(now time.Time) int {
	n := 0
	for len(e.waiting) > 0 {
		r := e.waiting[0]
		if r.gone.Load() {
			e.popWaiting()
			continue
		}
		if e.cfg.MaxBatch > 0 && len(e.running) >= e.cfg.MaxBatch {
			break
		}
		if e.cfg.KVCapacityTokens > 0 && e.kvUsed+r.kv > e.cfg.KVCapacityTokens {
			break
		}
		e.popWaiting()
		e.kvUsed += r.kv
		r.cached = e.cachedTokens(r)
		r.mu.Lock()
		r.served = r.cached
		r.mu.Unlock()
		r.runIndex = len(e.running)
		e.running = append(e.running, r)
		n++
		if e.fixed {
			r.probeHit = r.probeHit || e.probing()
			r.due = now.Add(jitter(r.rng, e.stretch(e.cfg.FixedTTFT), e.cfg.Jitter))
			if r.stallAt == 0 {
				r.due = r.due.Add(e.cfg.StallDuration)
			}
			heap.Push(&e.heap, r)
		}
	}
	return n
}

func (e *engine) popWaiting() {
	e.waiting[0] = nil
	e.waiting = e.waiting[1:]
	e.queued.Add(-1)
}

// remove drops r from the running set and frees its KV cache.
func (e *engine) remove(r *request) {
	last := len(e.running) - 1
	e.running[r.runIndex] = e.running[last]
	e.running[r.runIndex].runIndex = r.runIndex
	e.running[last] = nil
	e.running = e.running[:last]
	e.kvUsed -= r.kv
}

// produce hands the next token of r to its handler; it reports whether r
// is now finished.
func (e *engine) produce(r *request, now time.Time) bool {
	r.produced++
	done := r.produced >= r.target
	e.metrics.token(r, now, done)
	if e.probed(r) {
		e.metrics.probed(r.produced == 1, done)
	}
	r.lastToken = now
	r.mu.Lock()
	r.times = append(r.times, now.UnixNano())
	r.finished = done
	r.mu.Unlock()
	e.wake = append(e.wake, r)
	return done
}

// advance does everything due at now: finishes the current step (batching)
// or produces due tokens (fixed), admits waiting requests and starts the
// next step.
func (e *engine) advance(now time.Time) {
	if e.fixed {
		e.advanceFixed(now)
	} else {
		e.advanceBatching(now)
	}
	e.metrics.state(len(e.running), int(e.queued.Load()), e.kvUsed, e.cfg.KVCapacityTokens)
	// Wake the handlers last, so that a client which saw its last token
	// also sees it in the metrics and the batch.
	for i, r := range e.wake {
		select {
		case r.notify <- struct{}{}:
		default:
		}
		e.wake[i] = nil
	}
	e.wake = e.wake[:0]
}

func (e *engine) advanceBatching(now time.Time) {
	stepStart := now
	if e.inStep {
		if now.Before(e.stepEnd) {
			return
		}
		for i := 0; i < len(e.running); {
			r := e.running[i]
			if r.gone.Load() {
				e.remove(r)
				continue
			}
			if r.inStep && e.produce(r, now) {
				e.remove(r)
				continue
			}
			i++
		}
		e.inStep = false
		// Start the next step where this one should have ended, so timer
		// lateness does not accumulate, unless the scheduler fell a whole
		// step behind (then the lost time is lost, as on a real engine).
		if now.Sub(e.stepEnd) < e.stepLen {
			stepStart = e.stepEnd
		}
	}
	e.admit(now)
	batch, prefill := 0, 0
	for i := 0; i < len(e.running); {
		r := e.running[i]
		if r.gone.Load() {
			e.remove(r)
			continue
		}
		i++
		r.inStep = false
		if r.produced == r.stallAt && !r.stalled {
			r.stalled = true
			r.stallUntil = stepStart.Add(e.cfg.StallDuration)
		}
		if stepStart.Before(r.stallUntil) {
			continue
		}
		r.inStep = true
		batch++
		if r.produced == 0 {
			prefill += r.promptTokens - r.cached
		}
	}
	if batch == 0 {
		return
	}
	d := time.Duration(prefill)*e.cfg.PrefillPerToken + e.cfg.DecodeBase + time.Duration(batch)*e.cfg.DecodePerSeq
	if e.stepProbe = e.probing(); e.stepProbe {
		e.probeSteps++
	}
	e.stepLen = jitter(e.rng, e.stretch(d), e.cfg.Jitter)
	e.stepEnd = stepStart.Add(e.stepLen)
	e.inStep = true
}

func (e *engine) advanceFixed(now time.Time) {
	for {
		e.admit(now)
		removed := false
		for len(e.heap) > 0 && !e.heap[0].due.After(now) {
			r := e.heap[0]
			if r.gone.Load() || e.produce(r, now) {
				heap.Pop(&e.heap)
				e.remove(r)
				removed = true
				continue
			}
			r.probeHit = r.probeHit || e.probing()
			itl := jitter(r.rng, e.stretch(e.cfg.FixedITL), e.cfg.Jitter)
			// Keep the schedule drift-free when the scheduler woke a little
			// late, but never burst tokens after falling a whole gap behind.
			if r.due = r.due.Add(itl); r.due.Before(now) {
				r.due = now.Add(itl)
			}
			if r.produced == r.stallAt {
				r.due = r.due.Add(e.cfg.StallDuration)
			}
			heap.Fix(&e.heap, 0)
		}
		if !removed || len(e.waiting) == 0 {
			return
		}
	}
}

// next returns when advance must run again; ok is false when nothing is
// pending (the scheduler then waits for an arrival).
func (e *engine) next() (t time.Time, ok bool) {
	if e.fixed {
		if len(e.heap) == 0 {
			return time.Time{}, false
		}
		return e.heap[0].due, true
	}
	if e.inStep {
		return e.stepEnd, true
	}
	// Every running request is stalled (or none runs): wake at the first
	// stall end.
	for _, r := range e.running {
		if !ok || r.stallUntil.Before(t) {
			t, ok = r.stallUntil, true
		}
	}
	return t, ok
}

// dueHeap orders running requests by the due time of their next token.
type dueHeap []*request

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].seq < h[j].seq
	}
	return h[i].due.Before(h[j].due)
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIndex = i
	h[j].heapIndex = j
}
func (h *dueHeap) Push(x any) {
	r := x.(*request)
	r.heapIndex = len(*h)
	*h = append(*h, r)
}
func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	r := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return r
}
