package client

import (
	"bytes"
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/gpulens/gpulens/loadgen/report"
)

// scanChunk is an allocation-free decoder for the fields of an OpenAI
// stream chunk that the client needs: model, choices[].delta.content /
// reasoning_content / reasoning, choices[].text, choices[].finish_reason and
// usage (with its reasoning_tokens, completion_tokens_details and
// prompt_tokens_details). It validates the whole document as strictly as
// encoding/json and returns true only when its result is exactly what
// parseChunkJSON would return; whenever it is unsure (an error object,
// escapes or non-ASCII bytes in keys, keys that match a known one only
// case-insensitively, duplicate known keys, non-integer or huge token
// counts, deep nesting, invalid JSON) it returns false and the caller falls
// back to encoding/json. FuzzScanChunk checks the equivalence.
func scanChunk(data []byte, p *parsed) bool {
	s := scanner{b: data}
	if !s.consume('{') {
		return false
	}
	o := object{keys: topKeys}
	for {
		switch k := s.next(&o); k {
		case endObject, badObject:
			s.ws()
			return k == endObject && s.i == len(s.b)
		case topModel:
			if s.null() {
				continue
			}
			raw, ok := s.str()
			if !ok || bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
				return false
			}
			p.model = raw
		case topChoices:
			if !s.choices(p) {
				return false
			}
		case topUsage:
			if s.null() {
				continue
			}
			if !s.usage(&p.usage) {
				return false
			}
			p.hasUsage = true
		case topSim:
			if s.null() {
				continue
			}
			p.sim = new(report.SimTimestamps)
			if !s.sim(p.sim) {
				return false
			}
		case topError:
			if !s.null() {
				return false // rare: let encoding/json decode it
			}
		}
	}
}

// Key tables: a key's id is its index in its table.
const (
	topModel = iota
	topChoices
	topUsage
	topError
	topSim
)

const (
	choiceDelta = iota
	choiceText
	choiceFinish
)

const (
	deltaContent = iota
	deltaReasoningContent
	deltaReasoning
	deltaRole
)

const (
	usagePrompt = iota
	usageCompletion
	usageReasoning
	usageDetails
	usagePromptDetails
)

var (
	topKeys           = []string{topModel: "model", topChoices: "choices", topUsage: "usage", topError: "error", topSim: "gpulens_sim"}
	choiceKeys        = []string{choiceDelta: "delta", choiceText: "text", choiceFinish: "finish_reason"}
	deltaKeys         = []string{deltaContent: "content", deltaReasoningContent: "reasoning_content", deltaReasoning: "reasoning", deltaRole: "role"}
	usageKeys         = []string{usagePrompt: "prompt_tokens", usageCompletion: "completion_tokens", usageReasoning: "reasoning_tokens", usageDetails: "completion_tokens_details", usagePromptDetails: "prompt_tokens_details"}
	detailsKeys       = []string{"reasoning_tokens"}
	promptDetailsKeys = []string{"cached_tokens"}
	simKeys           = []string{simArrival: "arrival_unix_nano", simFirstToken: "first_token_unix_nano", simTokens: "token_unix_nanos", simChunks: "chunk_unix_nanos"}
)

const (
	simArrival = iota
	simFirstToken
	simTokens
	simChunks
)

const (
	keyOther  = -1 // not a field of ours: skip its value
	keyUnsure = -2 // might match one of ours the way encoding/json matches: fall back
)

// keyID returns the index of key in keys, keyOther, or keyUnsure for a key
// that encoding/json could match to one of keys although it is not equal
// (case folding, escapes, non-ASCII bytes that fold to ASCII).
func keyID(key []byte, keys []string) int {
	for i, k := range keys {
		if string(key) == k {
			return i
		}
	}
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return keyUnsure
		}
	}
	for _, k := range keys {
		if bytes.EqualFold(key, []byte(k)) {
			return keyUnsure
		}
	}
	return keyOther
}

// maxDepth bounds the nesting the scanner skips over (encoding/json allows
// 10,000; deeper documents take the fallback).
const maxDepth = 64

type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and then c.
func (s *scanner) consume(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object walks the members of an object whose '{' has been read.
type object struct {
	keys  []string // the keys of ours, by id
	depth int      // the depth passed to skip for the values of other keys
	seen  uint8    // the ids read so far
	more  bool     // past the first member
}

const (
	endObject = -1 // next: the object ended
	badObject = -2 // next: invalid JSON, or a key to leave to encoding/json
)

// next skips the members whose keys are not ours and returns the id of the
// next key of ours with the scanner at its value, endObject after the
// closing '}', or badObject.
func (s *scanner) next(o *object) int {
	for {
		ok, end := s.more('}', !o.more)
		o.more = true
		if !ok {
			return badObject
		}
		if end {
			return endObject
		}
		key, ok := s.str()
		if !ok || !s.consume(':') {
			return badObject
		}
		s.ws()
		switch k := keyID(key, o.keys); k {
		case keyUnsure:
			return badObject
		case keyOther:
			if !s.skip(o.depth) {
				return badObject
			}
		default:
			if o.seen&(1<<k) != 0 {
				return badObject // duplicate: encoding/json keeps the last
			}
			o.seen |= 1 << k
			return k
		}
	}
}

// more moves to the next member of an object or array whose opening bracket
// has been read; first is true right after that bracket. end is true after
// the closing bracket, close.
func (s *scanner) more(close byte, first bool) (ok, end bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	if s.b[s.i] == close {
		s.i++
		return true, true
	}
	if !first {
		if s.b[s.i] != ',' {
			return false, false
		}
		s.i++
	}
	return true, false
}

// null consumes a null literal if one is next (after white space).
func (s *scanner) null() bool {
	s.ws()
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// str reads a string and returns its raw (still escaped) contents. It
// validates escapes and rejects control characters as encoding/json does.
func (s *scanner) str() ([]byte, bool) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for i := start; i < len(s.b); i++ {
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return s.b[start:i], true
		case c == '\\':
			i++
			if i >= len(s.b) {
				return nil, false
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(s.b) {
					return nil, false
				}
				for _, h := range s.b[i+1 : i+5] {
					if !isHex(h) {
						return nil, false
					}
				}
				i += 4
			default:
				return nil, false
			}
		case c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// textLen reads a string or null and returns the length in bytes of the
// string encoding/json would decode (escapes resolved, invalid UTF-8 and
// unpaired surrogates replaced by U+FFFD; null: 0).
func (s *scanner) textLen() (n int, ok bool) {
	if s.null() {
		return 0, true
	}
	raw, ok := s.str()
	return decodedLen(raw), ok
}

// decodedLen mirrors encoding/json's unquote for a validated raw string.
func decodedLen(raw []byte) int {
	n := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if raw[i+1] != 'u' {
				n++
				i += 2
				continue
			}
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if dec := utf16.DecodeRune(r, hex4(raw[i+2:])); dec != utf8.RuneError {
						n += utf8.RuneLen(dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			n += utf8.RuneLen(r)
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			n += utf8.RuneLen(r) // RuneError (invalid byte): 3 bytes
			i += size
		}
	}
	return n
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c >= 'a':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// choices reads the choices array (or null).
func (s *scanner) choices(p *parsed) bool {
	if s.null() {
		return true
	}
	if !s.consume('[') {
		return false
	}
	for first := true; ; first = false {
		if ok, end := s.more(']', first); !ok || end {
			return ok
		}
		if !s.choice(p) {
			return false
		}
	}
}

// choice reads one element of choices (an object or null).
func (s *scanner) choice(p *parsed) bool {
	if s.null() {
		return true
	}
	if !s.consume('{') {
		return false
	}
	o := object{keys: choiceKeys, depth: 1}
	for {
		switch k := s.next(&o); k {
		case endObject, badObject:
			return k == endObject
		case choiceDelta:
			if !s.delta(p) {
				return false
			}
		case choiceText, choiceFinish:
			n, ok := s.textLen()
			if !ok {
				return false
			}
			if k == choiceText {
				p.answerBytes += n
			} else if n > 0 {
				p.finished = true
			}
		}
	}
}

// delta reads a choice's delta object (or null).
func (s *scanner) delta(p *parsed) bool {
	if s.null() {
		return true
	}
	if !s.consume('{') {
		return false
	}
	o := object{keys: deltaKeys, depth: 2}
	var rc, rr []byte // the raw reasoning_content and reasoning
	for {
		k := s.next(&o)
		if k == badObject {
			return false
		}
		if k == endObject {
			break
		}
		if k == deltaContent || k == deltaRole {
			n, ok := s.textLen()
			if !ok {
				return false
			}
			if k == deltaContent {
				p.answerBytes += n
			}
			continue
		}
		if s.null() {
			continue
		}
		raw, ok := s.str()
		if !ok {
			return false
		}
		if k == deltaReasoningContent {
			rc = raw
		} else {
			rr = raw
		}
	}
	// Both names with text: once when it is the same text (reasoningText).
	// Equal raw strings decode equal; different ones without escapes or
	// invalid UTF-8 decode different; anything else goes to encoding/json.
	n1, n2 := decodedLen(rc), decodedLen(rr)
	if n1 > 0 && n2 > 0 {
		if bytes.Equal(rc, rr) {
			n2 = 0
		} else if bytes.IndexByte(rc, '\\') >= 0 || bytes.IndexByte(rr, '\\') >= 0 || !utf8.Valid(rc) || !utf8.Valid(rr) {
			return false
		}
	}
	p.reasoningBytes += n1 + n2
	return true
}

// usage reads a usage object: the counts, and the reasoning count as
// usageJSON.usage picks it (completion_tokens_details first).
func (s *scanner) usage(u *Usage) bool {
	if !s.consume('{') {
		return false
	}
	o := object{keys: usageKeys, depth: 1}
	var top, detail int
	var haveTop, haveDetail bool
	for {
		k := s.next(&o)
		if k == badObject {
			return false
		}
		if k == endObject {
			break
		}
		if s.null() {
			continue // encoding/json leaves an int alone (0), a pointer nil
		}
		if k == usageDetails {
			if !s.details(&detail, &haveDetail) {
				return false
			}
			continue
		}
		if k == usagePromptDetails {
			if !s.promptDetails(&u.PromptTokensDetails) {
				return false
			}
			continue
		}
		v, ok := s.integer()
		if !ok {
			return false
		}
		switch k {
		case usagePrompt:
			u.PromptTokens = v
		case usageCompletion:
			u.CompletionTokens = v
		case usageReasoning:
			top, haveTop = v, true
		}
	}
	switch {
	case haveDetail:
		u.ReasoningTokens, u.Reasoning = detail, true
	case haveTop:
		u.ReasoningTokens, u.Reasoning = top, true
	}
	return true
}

// details reads a completion_tokens_details object (not null).
func (s *scanner) details(v *int, have *bool) bool {
	if !s.consume('{') {
		return false
	}
	o := object{keys: detailsKeys, depth: 2}
	for {
		switch k := s.next(&o); k {
		case endObject:
			return true
		case badObject:
			return false
		}
		if s.null() {
			continue
		}
		n, ok := s.integer()
		if !ok {
			return false
		}
		*v, *have = n, true
	}
}

// promptDetails reads usage.prompt_tokens_details (its cached_tokens).
func (s *scanner) promptDetails(d *PromptTokensDetails) bool {
	if !s.consume('{') {
		return false
	}
	o := object{keys: promptDetailsKeys, depth: 2}
	for {
		k := s.next(&o)
		if k < 0 {
			return k == endObject
		}
		if s.null() {
			continue
		}
		v, ok := s.integer()
		if !ok {
			return false
		}
		d.CachedTokens = OptInt{V: v, Set: true}
	}
}

// integer reads -?(0|[1-9][0-9]*) with at most 18 digits, followed by a
// delimiter (anything else, such as a fraction or exponent, falls back).
func (s *scanner) integer() (int, bool) {
	i := s.i
	neg := i < len(s.b) && s.b[i] == '-'
	if neg {
		i++
	}
	start := i
	v := 0
	for i < len(s.b) && '0' <= s.b[i] && s.b[i] <= '9' {
		v = v*10 + int(s.b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || digits > 18 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	if i < len(s.b) {
		switch s.b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return 0, false
		}
	}
	s.i = i
	if neg {
		v = -v
	}
	return v, true
}

// sim reads the simulator's gpulens_sim object (not null) into t, as
// encoding/json decodes it into report.SimTimestamps: its times are the
// accuracy benchmark's reference, and one per request would otherwise
// send the whole last chunk to encoding/json.
func (s *scanner) sim(t *report.SimTimestamps) bool {
	if !s.consume('{') {
		return false
	}
	o := object{keys: simKeys, depth: 1}
	for {
		k := s.next(&o)
		switch k {
		case endObject:
			return true
		case badObject:
			return false
		}
		if s.null() {
			continue // encoding/json leaves the field alone
		}
		var ok bool
		switch k {
		case simArrival:
			t.ArrivalUnixNano, ok = s.int64v()
		case simFirstToken:
			t.FirstTokenUnixNano, ok = s.int64v()
		case simTokens:
			t.TokenUnixNanos, ok = s.int64s()
		case simChunks:
			t.ChunkUnixNanos, ok = s.int64s()
		}
		if !ok {
			return false
		}
	}
}

// int64s reads an array of integers (not null) into a new slice of its
// length (empty, not nil, for [] as encoding/json decodes it); a null or
// other element falls back.
func (s *scanner) int64s() ([]int64, bool) {
	if !s.consume('[') {
		return nil, false
	}
	start, n := s.i, 0
	for pass := 0; pass < 2; pass++ {
		var out []int64
		if pass == 1 {
			s.i, out = start, make([]int64, 0, n)
		}
		for first := true; ; first = false {
			ok, end := s.more(']', first)
			if !ok {
				return nil, false
			}
			if end {
				break
			}
			s.ws()
			v, ok := s.int64v()
			if !ok {
				return nil, false
			}
			if pass == 0 {
				n++
			} else {
				out = append(out, v)
			}
		}
		if pass == 1 {
			return out, true
		}
	}
	return nil, false // not reached
}

// int64v reads an int64 as integer does, up to 19 digits within its
// range.
func (s *scanner) int64v() (int64, bool) {
	i := s.i
	neg := i < len(s.b) && s.b[i] == '-'
	if neg {
		i++
	}
	start := i
	var v uint64
	for i < len(s.b) && '0' <= s.b[i] && s.b[i] <= '9' {
		if i-start == 19 {
			return 0, false
		}
		v = v*10 + uint64(s.b[i]-'0')
		i++
	}
	digits := i - start
	if digits == 0 || (digits > 1 && s.b[start] == '0') {
		return 0, false
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	if v > limit {
		return 0, false
	}
	if i < len(s.b) {
		switch s.b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
		default:
			return 0, false
		}
	}
	s.i = i
	if neg {
		return int64(-v), true
	}
	return int64(v), true
}

// skip validates and skips any JSON value.
func (s *scanner) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '{' || c == '[':
		s.i++
		for first := true; ; first = false {
			if ok, end := s.more(c+2, first); !ok || end { // c+2: '}' or ']'
				return ok
			}
			if c == '{' {
				if _, ok := s.str(); !ok || !s.consume(':') {
					return false
				}
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *scanner) literal(lit string) bool {
	if bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		s.i += len(lit)
		return true
	}
	return false
}

// number skips a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	s.i = i
	return true
}
