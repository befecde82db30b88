package client

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// scanChunk is an allocation-free decoder for the fields of an OpenAI
// stream chunk that the client needs: model, choices[].delta.content /
// reasoning_content / reasoning, choices[].text, choices[].finish_reason and
// usage. It validates the whole document as strictly as encoding/json and
// returns true only when its result is exactly what parseChunkJSON would
// return; whenever it is unsure (an error or gpulens_sim object, escapes or
// non-ASCII bytes in keys, keys that match a known one only
// case-insensitively, duplicate known keys, non-integer or huge token
// counts, deep nesting, invalid JSON) it returns false and the caller falls
// back to encoding/json. FuzzScanChunk checks the equivalence.
func scanChunk(data []byte, p *parsed) bool {
	s := scanner{b: data}
	s.ws()
	if !s.objectStart() {
		return false
	}
	var seen uint8
	for first := true; ; first = false {
		key, ok, end := s.nextKey(first)
		if !ok {
			return false
		}
		if end {
			break
		}
		var bit uint8
		switch k := keyID(key, topKeys); k {
		case keyUnsure:
			return false
		case keyOther:
			if !s.skip(0) {
				return false
			}
			continue
		default:
			bit = 1 << k
		}
		if seen&bit != 0 {
			return false // duplicate: encoding/json keeps the last
		}
		seen |= bit
		switch bit {
		case 1 << topModel:
			if s.null() {
				continue
			}
			raw, ok := s.str()
			if !ok || bytes.IndexByte(raw, '\\') >= 0 || !utf8.Valid(raw) {
				return false
			}
			p.model = raw
		case 1 << topChoices:
			if !s.choices(p) {
				return false
			}
		case 1 << topUsage:
			if s.null() {
				continue
			}
			if !s.usage(&p.usage) {
				return false
			}
			p.hasUsage = true
		case 1 << topError, 1 << topSim:
			if !s.null() {
				return false // rare: let encoding/json decode it
			}
		}
	}
	s.ws()
	return s.i == len(s.b)
}

// Key tables: the index in the table is the key's id.
const (
	topModel = iota
	topChoices
	topUsage
	topError
	topSim
)

var (
	topKeys    = []string{"model", "choices", "usage", "error", "gpulens_sim"}
	choiceKeys = []string{"delta", "text", "finish_reason"}
	deltaKeys  = []string{"content", "reasoning_content", "reasoning", "role"}
	usageKeys  = []string{"prompt_tokens", "completion_tokens"}
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

func (s *scanner) objectStart() bool { return s.consume('{') }

// nextKey reads the next key of an object and its colon. first is true for
// the first key, right after '{'. end is true at the closing '}'.
func (s *scanner) nextKey(first bool) (key []byte, ok, end bool) {
	s.ws()
	if s.i >= len(s.b) {
		return nil, false, false
	}
	if s.b[s.i] == '}' {
		s.i++
		return nil, true, true
	}
	if !first {
		if s.b[s.i] != ',' {
			return nil, false, false
		}
		s.i++
		s.ws()
	}
	key, ok = s.str()
	if !ok || !s.consume(':') {
		return nil, false, false
	}
	s.ws()
	return key, true, false
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
// unpaired surrogates replaced by U+FFFD).
func (s *scanner) textLen() (n int, isNull, ok bool) {
	if s.null() {
		return 0, true, true
	}
	raw, ok := s.str()
	if !ok {
		return 0, false, false
	}
	return decodedLen(raw), false, true
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
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.choice(p) {
			return false
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// choice reads one element of choices (an object or null).
func (s *scanner) choice(p *parsed) bool {
	if s.null() {
		return true
	}
	if !s.objectStart() {
		return false
	}
	var seen uint8
	for first := true; ; first = false {
		key, ok, end := s.nextKey(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		k := keyID(key, choiceKeys)
		switch k {
		case keyUnsure:
			return false
		case keyOther:
			if !s.skip(1) {
				return false
			}
			continue
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		switch choiceKeys[k] {
		case "delta":
			if !s.delta(p) {
				return false
			}
		case "text":
			n, _, ok := s.textLen()
			if !ok {
				return false
			}
			p.contentBytes += n
		case "finish_reason":
			n, _, ok := s.textLen()
			if !ok {
				return false
			}
			if n > 0 {
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
	if !s.objectStart() {
		return false
	}
	var seen uint8
	for first := true; ; first = false {
		key, ok, end := s.nextKey(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		k := keyID(key, deltaKeys)
		switch k {
		case keyUnsure:
			return false
		case keyOther:
			if !s.skip(2) {
				return false
			}
			continue
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		n, _, ok := s.textLen()
		if !ok {
			return false
		}
		if deltaKeys[k] != "role" {
			p.contentBytes += n
		}
	}
}

// usage reads a usage object.
func (s *scanner) usage(u *Usage) bool {
	if !s.objectStart() {
		return false
	}
	var seen uint8
	for first := true; ; first = false {
		key, ok, end := s.nextKey(first)
		if !ok {
			return false
		}
		if end {
			return true
		}
		k := keyID(key, usageKeys)
		switch k {
		case keyUnsure:
			return false
		case keyOther:
			if !s.skip(1) {
				return false
			}
			continue
		}
		if seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		if s.null() {
			continue // encoding/json leaves the field alone: 0
		}
		v, ok := s.integer()
		if !ok {
			return false
		}
		if k == 0 {
			u.PromptTokens = v
		} else {
			u.CompletionTokens = v
		}
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
	case c == '{':
		s.i++
		for first := true; ; first = false {
			_, ok, end := s.nextKey(first)
			if !ok {
				return false
			}
			if end {
				return true
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	case c == '[':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			s.ws()
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case ',':
				s.i++
			case ']':
				s.i++
				return true
			default:
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
