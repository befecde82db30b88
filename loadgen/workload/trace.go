package workload

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
)

// Trace formats (TraceOptions.Format, Trace.Format); docs/loadgen.md,
// "Trace replay", documents each.
const (
	// TraceMooncake is Mooncake's JSON lines: {"timestamp": ms,
	// "input_length": n, "output_length": n, "hash_ids": [...]}.
	TraceMooncake = "mooncake"
	// TraceAzure is the Azure LLM inference trace CSV: TIMESTAMP,
	// ContextTokens, GeneratedTokens.
	TraceAzure = "azure"
	// TraceBurstGPT is the BurstGPT CSV: Timestamp, Model, Request tokens,
	// Response tokens, Total tokens, Log Type.
	TraceBurstGPT = "burstgpt"
)

// TraceFormats lists the trace formats.
var TraceFormats = []string{TraceMooncake, TraceAzure, TraceBurstGPT}

// MooncakeBlockTokens is how many prompt tokens one Mooncake hash id
// stands for: requests whose hash_ids start alike share that many tokens
// of prompt prefix per equal id.
const MooncakeBlockTokens = 512

// TraceRequest is one request of a trace.
type TraceRequest struct {
	// Arrival is when the request arrives, after the trace's first request,
	// divided by the speed-up.
	Arrival      time.Duration
	InputTokens  int
	OutputTokens int
	// HashIDs are the Mooncake prefix blocks of the prompt (nil for the
	// other formats).
	HashIDs []int64
	// Line is the request's line in the file (1-based).
	Line int
}

// Trace is a loaded trace file.
type Trace struct {
	Name   string // base name
	SHA256 string // of the file's bytes
	Format string
	// Speedup and MaxRequests are the options it was loaded with.
	Speedup     float64
	MaxRequests int
	Requests    []TraceRequest
	// Skipped counts the rows left out for zero input or output tokens
	// (failed requests in BurstGPT, for one).
	Skipped int
}

// TraceOptions shape a trace as it is loaded.
type TraceOptions struct {
	// Format is one of TraceFormats, or "" to recognise it from the
	// content: JSON lines are Mooncake, a CSV header names Azure or
	// BurstGPT.
	Format string
	// Speedup divides the arrival offsets (2 replays twice as fast); 0
	// means 1.
	Speedup float64
	// MaxRequests keeps only the first requests (0: all).
	MaxRequests int
}

// Validate checks the options.
func (o TraceOptions) Validate() error {
	if o.Format != "" && !isTraceFormat(o.Format) {
		return option.Errorf("%s %q: want %s", option.Name("TraceFormat"), o.Format, strings.Join(TraceFormats, ", "))
	}
	if o.Speedup < 0 || math.IsNaN(o.Speedup) || math.IsInf(o.Speedup, 0) {
		return option.Errorf("%s must be a positive number, got %v", option.Name("TraceSpeedup"), o.Speedup)
	}
	if o.MaxRequests < 0 {
		return option.Errorf("%s must not be negative, got %d", option.Name("TraceMaxRequests"), o.MaxRequests)
	}
	return nil
}

func isTraceFormat(f string) bool {
	for _, k := range TraceFormats {
		if f == k {
			return true
		}
	}
	return false
}

// LoadTrace reads a trace file. Errors name the file and, for a bad row,
// its line. The file is read as a stream (traces run to gigabytes), to its
// end even with MaxRequests: Trace.SHA256 is the whole file's.
func LoadTrace(path string, o TraceOptions) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trace: %w", err)
	}
	defer f.Close()
	t, err := ParseTrace(f, path, o)
	if err != nil {
		return nil, err
	}
	t.Name = filepath.Base(path)
	return t, nil
}

// ParseTrace parses a trace from r; name names it in errors.
func ParseTrace(r io.Reader, name string, o TraceOptions) (*Trace, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(r, h), 64<<10)
	if bom, _ := br.Peek(3); bytes.Equal(bom, []byte("\xef\xbb\xbf")) {
		_, _ = br.Discard(3)
	}
	t := &Trace{Name: name, Format: o.Format, Speedup: o.Speedup, MaxRequests: o.MaxRequests}
	if t.Speedup == 0 {
		t.Speedup = 1
	}
	if t.Format == "" {
		f, err := detectTraceFormat(br)
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", name, err)
		}
		t.Format = f
	}
	// Arrival times as read, in nanoseconds on the trace's own clock.
	var (
		times []int64
		err   error
	)
	switch t.Format {
	case TraceMooncake:
		times, err = t.parseMooncake(br)
	default:
		times, err = t.parseCSV(br)
	}
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", name, err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, fmt.Errorf("trace %s: %w", name, err)
	}
	t.SHA256 = hex.EncodeToString(h.Sum(nil))
	if len(t.Requests) == 0 {
		return nil, fmt.Errorf("trace %s: no requests (%d rows skipped for zero tokens)", name, t.Skipped)
	}
	for i := range t.Requests {
		t.Requests[i].Arrival = time.Duration(math.Round(float64(times[i]-times[0]) / t.Speedup))
	}
	return t, nil
}

// detectTraceFormat recognises a trace by its first non-empty line, which
// it peeks at without consuming it.
func detectTraceFormat(br *bufio.Reader) (string, error) {
	head, err := br.Peek(64 << 10)
	if err != nil && err != io.EOF && !errors.Is(err, bufio.ErrBufferFull) {
		return "", err
	}
	for _, line := range bytes.Split(head, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if line[0] == '{' {
			return TraceMooncake, nil
		}
		h := strings.ToLower(string(line))
		switch {
		case strings.Contains(h, "contexttokens"):
			return TraceAzure, nil
		case strings.Contains(h, "request tokens"):
			return TraceBurstGPT, nil
		}
		return "", errors.New("the first line is neither a Mooncake JSON object nor an Azure (TIMESTAMP,ContextTokens,GeneratedTokens) or BurstGPT (Timestamp,Model,Request tokens,Response tokens,…) CSV header: name the format")
	}
	return "", errors.New("empty file")
}

// keep adds a request unless it has zero tokens (then it counts as
// skipped), and stops at MaxRequests: it reports whether to go on.
func (t *Trace) keep(r TraceRequest, at int64, times *[]int64) bool {
	if r.InputTokens == 0 || r.OutputTokens == 0 {
		t.Skipped++
		return true
	}
	t.Requests = append(t.Requests, r)
	*times = append(*times, at)
	return t.MaxRequests == 0 || len(t.Requests) < t.MaxRequests
}

// order checks that arrivals do not go back in time.
func order(line int, at, prev int64, havePrev bool, unit func(int64) string) error {
	if havePrev && at < prev {
		return fmt.Errorf("line %d: timestamp %s is before the previous row's %s: a trace must be in arrival order", line, unit(at), unit(prev))
	}
	return nil
}

func (t *Trace) parseMooncake(r io.Reader) ([]int64, error) {
	var times []int64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	ms := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e6, 'f', -1, 64) + " ms" }
	var prev int64
	rows := 0
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var rec struct {
			Timestamp    *json.Number  `json:"timestamp"`
			InputLength  *json.Number  `json:"input_length"`
			OutputLength *json.Number  `json:"output_length"`
			HashIDs      []json.Number `json:"hash_ids"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if dec.InputOffset() != int64(len(raw)) {
			return nil, fmt.Errorf("line %d: data after the JSON object", line)
		}
		for _, f := range []struct {
			name string
			v    *json.Number
		}{{"timestamp", rec.Timestamp}, {"input_length", rec.InputLength}, {"output_length", rec.OutputLength}} {
			if f.v == nil {
				return nil, fmt.Errorf("line %d: no %q field", line, f.name)
			}
		}
		tsMS, err := rec.Timestamp.Float64()
		if err != nil || tsMS < 0 || math.IsInf(tsMS, 0) || tsMS > 1e15 {
			return nil, fmt.Errorf("line %d: timestamp %q is not a non-negative number of milliseconds", line, rec.Timestamp.String())
		}
		in, err := count(*rec.InputLength)
		if err != nil {
			return nil, fmt.Errorf("line %d: input_length: %w", line, err)
		}
		out, err := count(*rec.OutputLength)
		if err != nil {
			return nil, fmt.Errorf("line %d: output_length: %w", line, err)
		}
		r := TraceRequest{InputTokens: in, OutputTokens: out, Line: line}
		for j, h := range rec.HashIDs {
			id, err := strconv.ParseInt(h.String(), 10, 64)
			if err != nil || id < 0 {
				return nil, fmt.Errorf("line %d: hash_ids[%d] %q is not a non-negative integer", line, j, h.String())
			}
			r.HashIDs = append(r.HashIDs, id)
		}
		at := int64(math.Round(tsMS * 1e6))
		if err := order(line, at, prev, rows > 0, ms); err != nil {
			return nil, err
		}
		prev = at
		rows++
		if !t.keep(r, at, &times) {
			return times, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return times, nil
}

// count parses a token count: a non-negative integer.
func count(n json.Number) (int, error) {
	v, err := strconv.ParseInt(n.String(), 10, 32)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a non-negative integer", n.String())
	}
	return int(v), nil
}

// csvColumns are the columns a CSV trace needs, by format, as its header
// spells them (matched without regard to case and surrounding space).
var csvColumns = map[string][3]string{
	TraceAzure:    {"timestamp", "contexttokens", "generatedtokens"},
	TraceBurstGPT: {"timestamp", "request tokens", "response tokens"},
}

func (t *Trace) parseCSV(r io.Reader) ([]int64, error) {
	rd := csv.NewReader(r)
	rd.FieldsPerRecord = -1
	rd.ReuseRecord = true
	header, err := rd.Read()
	if err != nil {
		if err == io.EOF {
			return nil, errors.New("empty file")
		}
		return nil, err
	}
	header = slices.Clone(header) // the reader reuses its record
	want := csvColumns[t.Format]
	var col [3]int
	for k, name := range want {
		col[k] = -1
		for i, h := range header {
			if strings.EqualFold(strings.TrimSpace(h), name) {
				col[k] = i
				break
			}
		}
		if col[k] < 0 {
			return nil, fmt.Errorf("line 1: %s header %q has no %q column", t.Format, strings.Join(header, ","), name)
		}
	}
	var (
		times []int64
		prev  int64
		rows  int
	)
	parseTime := parseBurstGPTTime
	unit := func(ns int64) string { return strconv.FormatFloat(float64(ns)/1e9, 'f', -1, 64) + " s" }
	if t.Format == TraceAzure {
		parseTime = parseAzureTime
		unit = func(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05.9999999") }
	}
	for {
		rec, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err // a csv.ParseError names the line
		}
		line, _ := rd.FieldPos(0)
		if len(rec) != len(header) {
			return nil, fmt.Errorf("line %d: %d fields, the header has %d", line, len(rec), len(header))
		}
		at, err := parseTime(strings.TrimSpace(rec[col[0]]))
		if err != nil {
			return nil, fmt.Errorf("line %d: %s %q: %w", line, header[col[0]], rec[col[0]], err)
		}
		var n [2]int
		for k := 1; k <= 2; k++ {
			if n[k-1], err = count(json.Number(strings.TrimSpace(rec[col[k]]))); err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", line, header[col[k]], err)
			}
		}
		if err := order(line, at, prev, rows > 0, unit); err != nil {
			return nil, err
		}
		prev = at
		rows++
		if !t.keep(TraceRequest{InputTokens: n[0], OutputTokens: n[1], Line: line}, at, &times) {
			break
		}
	}
	return times, nil
}

// parseAzureTime parses an Azure TIMESTAMP ("2023-11-16 18:15:46.6805900",
// up to nanoseconds, optionally with a zone such as "+00:00" or "Z") to
// Unix nanoseconds.
func parseAzureTime(s string) (int64, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UnixNano(), nil
		}
	}
	return 0, errors.New(`not a time like "2023-11-16 18:15:46.6805900"`)
}

// parseBurstGPTTime parses a BurstGPT Timestamp: seconds (an integer or a
// decimal) from the start of the trace.
func parseBurstGPTTime(s string) (int64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || v > 1e9 {
		return 0, errors.New("not a non-negative number of seconds")
	}
	return int64(math.Round(v * 1e9)), nil
}

// Offsets returns the requests' arrival offsets, in order: the schedule of
// a replay (loadgen/runner, ScheduleConfig.Offsets).
func (t *Trace) Offsets() []time.Duration {
	out := make([]time.Duration, len(t.Requests))
	for i, r := range t.Requests {
		out[i] = r.Arrival
	}
	return out
}

// traceRequest is request i of a replay: trace row i mod the trace's
// length, a prompt of its input length, max_tokens its output length.
func (w *Workload) traceRequest(i int) client.Request {
	tr := w.cfg.Trace.Requests[i%len(w.cfg.Trace.Requests)]
	var sb strings.Builder
	sb.Grow(tr.InputTokens * 8)
	sb.WriteString(w.cfg.PromptPrefix)
	words := 0
	if len(tr.HashIDs) == 0 {
		// As a synthetic prompt: the tag and index, then seeded words.
		if w.tag != "" {
			sb.WriteString(w.tag)
			sb.WriteByte('-')
		}
		sb.WriteString(strconv.Itoa(i))
		words = 1
	} else if w.tag != "" {
		// The tag leads every prompt of the run alike, so the blocks after
		// it are shared as the trace says.
		sb.WriteString(w.tag)
		words = 1
	}
	limit := w.cfg.Tokens.Words(tr.InputTokens) // the length in words (Config.Tokens)
	for _, id := range tr.HashIDs {
		if words >= limit {
			break
		}
		words = appendBlock(&sb, w.cfg.Seed, id, words, limit)
	}
	// What the blocks do not cover (or the whole prompt without blocks):
	// words of this request alone.
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(i)))
	appendWords(&sb, rng, words, limit)
	out := tr.OutputTokens
	if w.cfg.MaxTokens > 0 {
		out = min(out, w.cfg.MaxTokens)
	}
	return client.Request{Index: i, Prompt: sb.String(), InputTokens: tr.InputTokens, TargetInputTokens: tr.InputTokens, MaxTokens: out, IgnoreEOS: w.cfg.IgnoreEOS}
}

// appendBlock appends the words of Mooncake block id, from the word count
// have up to at most limit words in all, and returns the new count. A
// block is "h<id>" and 511 words drawn with the seed and the id: equal ids
// give equal blocks, different ids different ones.
func appendBlock(sb *strings.Builder, seed int64, id int64, have, limit int) int {
	rng := rand.New(rand.NewPCG(uint64(seed)^0xb10c, uint64(id)))
	if sb.Len() > 0 {
		sb.WriteByte(' ')
	}
	sb.WriteByte('h')
	sb.WriteString(strconv.FormatInt(id, 10))
	have++
	end := min(have-1+MooncakeBlockTokens, limit)
	return appendWords(sb, rng, have, end)
}

// appendWords appends words drawn from rng, each after a space, until the
// count have reaches limit, and returns the new count.
func appendWords(sb *strings.Builder, rng *rand.Rand, have, limit int) int {
	for ; have < limit; have++ {
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return have
}
