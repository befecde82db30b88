package simserver

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"image"
	_ "image/gif" // image_url parts: GIF, as PNG and JPEG
	_ "image/jpeg"
	_ "image/png"
	"math"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// A prompt is walked once, token by token, as the configured tokenizer
// and chat template cut it (promptWalk): the walk counts the prompt's
// tokens (usage.prompt_tokens, /tokenize) and, with a prefix cache, hashes
// them into blocks (prefixcache.go), so that a block of the cache is
// PrefixBlockTokens of the same tokens the usage counts: template tokens,
// sub-word pieces and image tokens included.
//
// Each token hashes its identity: a sub-word piece its bytes (the first
// piece of a word marked with the space it carries), a word its bytes
// (TokenizerWords), a token id its decimal text, a template token its
// name, and the k-th token of an image the image's hash and k, so that
// two prompts share a block only when everything up to its end is the
// same, images included (vLLM hashes an image's content into the blocks
// that hold its tokens, too).

// Identity markers: they keep the kinds of token apart.
const (
	markText    = 0
	markWord    = ' ' // a word's first piece
	markSpecial = 1
	markImage   = 2
)

// FNV-1a, 64 bits, inline: no allocation per token.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// promptWalk counts (and hashes) the tokens of one prompt.
type promptWalk struct {
	words  bool // TokenizerWords: one token per word, no template
	size   int  // block size in tokens; 0: count only
	n      int
	h      uint64
	blocks []uint64
	images int
	cache  *imageCache
	err    error // the first malformed part
}

func (s *Server) newWalk(hash bool) *promptWalk {
	p := &promptWalk{words: s.tokens.words, h: fnvOffset, cache: s.images}
	if hash && s.cfg.PrefixCacheTokens > 0 {
		p.size = s.cfg.PrefixBlockTokens
	}
	return p
}

// token adds one token of identity mark+id.
func (p *promptWalk) token(mark byte, id []byte) {
	p.n++
	if p.size == 0 {
		return
	}
	h := p.h
	h ^= uint64(mark)
	h *= fnvPrime
	for _, c := range id {
		h ^= uint64(c)
		h *= fnvPrime
	}
	h *= fnvPrime // a 0 byte ends the token
	p.h = h
	if p.n%p.size == 0 {
		p.blocks = append(p.blocks, h)
	}
}

func (p *promptWalk) special(name string) { p.token(markSpecial, []byte(name)) }

// word adds the tokens of one whitespace-separated word: itself
// (TokenizerWords) or its sub-word pieces as countSubword counts them (a
// run of letters one piece per 4 letters, of digits per 3 digits, any
// other character one piece).
func (p *promptWalk) word(w []byte) {
	if p.words {
		p.token(markWord, w)
		return
	}
	if p.size == 0 {
		p.n += countSubword(w)
		return
	}
	mark := byte(markWord)
	kind, runes, from := 0, 0, 0 // the piece being read: its kind (1 letters, 2 digits), runes, start
	for i := 0; i < len(w); {
		r, size := rune(w[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(w[i:])
		}
		k := 0
		switch {
		case unicode.IsLetter(r):
			k = 1
		case unicode.IsDigit(r):
			k = 2
		}
		full := kind == 1 && runes == 4 || kind == 2 && runes == 3
		if kind != 0 && (k != kind || full) {
			p.token(mark, w[from:i])
			mark, kind = markText, 0
		}
		if k == 0 {
			p.token(mark, w[i:i+size])
			mark = markText
		} else {
			if kind == 0 {
				kind, runes, from = k, 0, i
			}
			runes++
		}
		i += size
	}
	if kind != 0 {
		p.token(mark, w[from:])
	}
}

// content adds a message content or completions prompt: a string, an
// array of strings, of token ids, of arrays of them, or of content parts
// (text, image_url). A malformed part sets p.err.
func (p *promptWalk) content(raw json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || p.err != nil {
		return
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			fields([]byte(s), p.word)
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
				p.part(it)
			case it[0] == '"' || it[0] == '[':
				p.content(it)
			default:
				p.token(markText, it) // a token id
			}
		}
	}
}

// part adds one content part: {"type":"text","text":…} (a part without a
// type is read as text) or {"type":"image_url","image_url":{"url":…}}.
func (p *promptWalk) part(raw json.RawMessage) {
	var part struct {
		Type     *string         `json:"type"`
		Text     string          `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &part); err != nil {
		p.err = fmt.Errorf("content part: %v", err)
		return
	}
	switch {
	case part.Type == nil || *part.Type == "text":
		fields([]byte(part.Text), p.word)
	case *part.Type == "image_url":
		p.image(part.ImageURL)
	default:
		p.err = fmt.Errorf("content part type %q is not supported (text or image_url)", *part.Type)
	}
}

// image adds the tokens of an image_url part.
func (p *promptWalk) image(raw json.RawMessage) {
	var iu struct {
		URL *string `json:"url"`
	}
	if err := json.Unmarshal(raw, &iu); err != nil || iu.URL == nil {
		p.err = errors.New(`image_url: want {"url": "data:image/…;base64,…"}`)
		return
	}
	info := p.cache.lookup(*iu.URL)
	if info.err != nil {
		p.err = info.err
		return
	}
	p.images++
	var id [12]byte
	binary.LittleEndian.PutUint64(id[:8], info.hash)
	for k := 0; k < info.tokens; k++ {
		binary.LittleEndian.PutUint32(id[8:], uint32(k))
		p.token(markImage, id[:])
	}
}

// chat walks a chat request's messages: with the sub-word tokenizer, the
// Llama-3-like template (tokenizer.go) around them: BOS, then per message
// its header (4 tokens), content and end (1), then, when generation is
// true, the assistant's header (4).
func (p *promptWalk) chat(messages []json.RawMessage, generation bool) error {
	if !p.words {
		p.special("<|begin_of_text|>")
	}
	for _, m := range messages {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(m, &msg); err != nil {
			return fmt.Errorf("messages: %v", err)
		}
		if err := validateContent(msg.Content); err != nil {
			return fmt.Errorf("messages: %v", err)
		}
		if !p.words {
			p.header(msg.Role)
		}
		p.content(msg.Content)
		if p.err != nil {
			return fmt.Errorf("messages: %v", p.err)
		}
		if !p.words {
			p.special("<|eot_id|>")
		}
	}
	if generation && !p.words {
		p.header("assistant")
	}
	return nil
}

func (p *promptWalk) header(role string) {
	p.special("<|start_header_id|>")
	p.token(markSpecial, []byte(role))
	p.special("<|end_header_id|>")
	p.special("\n\n")
}

// prompt walks a completions prompt: BOS (sub-word tokenizer), then it.
func (p *promptWalk) prompt(raw json.RawMessage) error {
	if !p.words {
		p.special("<|begin_of_text|>")
	}
	p.content(raw)
	return p.err
}

// Images: the simulator charges each image the tokens Qwen2-VL's image
// processor gives it (qwen_vl_utils' smart_resize): the image is resized
// so that both sides are multiples of 28 pixels (14-pixel ViT patches,
// merged 2×2 into one token) nearest its own, scaled down to at most
// 16384 tokens' pixels or up to at least 4, keeping its aspect ratio;
// it then takes (height/28) × (width/28) tokens, plus 2 for the
// <|vision_start|> and <|vision_end|> tokens around them. A 512×512 image
// takes 18 × 18 + 2 = 326 tokens, 1024×768 37 × 27 + 2 = 1001.
const (
	imageFactor    = 28
	imageMinPixels = 4 * 28 * 28
	imageMaxPixels = 16384 * 28 * 28
	imageMaxRatio  = 200
	imageExtra     = 2
	// imageMaxDecode is Pillow's decompression-bomb limit
	// (Image.MAX_IMAGE_PIXELS × 2, where it raises): larger images are
	// refused before they are decoded.
	imageMaxDecode = 2 * 89478485
)

// ImageTokens returns the prompt tokens of a width × height image, or an
// error when its aspect ratio is over 200 (as the processor refuses it).
func ImageTokens(width, height int) (int, error) {
	if width < 1 || height < 1 {
		return 0, fmt.Errorf("image of %dx%d pixels", width, height)
	}
	if float64(max(width, height))/float64(min(width, height)) > imageMaxRatio {
		return 0, fmt.Errorf("image of %dx%d pixels: the aspect ratio must be at most %d", width, height, imageMaxRatio)
	}
	h, w := float64(height), float64(width)
	roundBy := func(x float64) float64 { return math.RoundToEven(x/imageFactor) * imageFactor }
	hb, wb := max(imageFactor, roundBy(h)), max(imageFactor, roundBy(w))
	switch {
	case hb*wb > imageMaxPixels:
		beta := math.Sqrt(h * w / imageMaxPixels)
		hb = max(imageFactor, math.Floor(h/beta/imageFactor)*imageFactor)
		wb = max(imageFactor, math.Floor(w/beta/imageFactor)*imageFactor)
	case hb*wb < imageMinPixels:
		beta := math.Sqrt(imageMinPixels / (h * w))
		hb = math.Ceil(h*beta/imageFactor) * imageFactor
		wb = math.Ceil(w*beta/imageFactor) * imageFactor
	}
	return int(hb/imageFactor)*int(wb/imageFactor) + imageExtra, nil
}

// imageInfo is what an image URL gave: its tokens and its hash, or why
// it was refused.
type imageInfo struct {
	tokens int
	hash   uint64
	err    error
}

// imageCache remembers the images it decoded, by a hash of their URL: a
// load generator sends the same few images again and again. It is shared
// by the handlers.
type imageCache struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]imageInfo
}

// maxCachedImages bounds the cache; when full it starts over.
const maxCachedImages = 1024

func newImageCache() *imageCache {
	return &imageCache{seed: maphash.MakeSeed(), m: map[uint64]imageInfo{}}
}

func (c *imageCache) lookup(url string) imageInfo {
	key := maphash.String(c.seed, url)
	c.mu.Lock()
	info, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return info
	}
	info = decodeImageURL(url)
	info.hash = key
	c.mu.Lock()
	if len(c.m) >= maxCachedImages {
		clear(c.m)
	}
	c.m[key] = info
	c.mu.Unlock()
	return info
}

// decodeImageURL decodes a data: URL's image (PNG, JPEG or GIF, base64)
// whole, as a server does before it runs the model, and returns its
// tokens. Remote URLs are refused: the simulator fetches nothing.
func decodeImageURL(url string) imageInfo {
	fail := func(format string, args ...any) imageInfo {
		return imageInfo{err: fmt.Errorf("image_url: "+format, args...)}
	}
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		if strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://") {
			return fail("the simulator fetches no remote image; send it as a data: URL")
		}
		return fail("want a data: URL (data:image/png;base64,…)")
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok {
		return fail("invalid data: URL (no comma)")
	}
	media, ok := strings.CutSuffix(meta, ";base64")
	if !ok {
		return fail("the data: URL must be base64-encoded (;base64)")
	}
	if !strings.HasPrefix(media, "image/") {
		return fail("media type %q is not an image", media)
	}
	b, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return fail("invalid base64: %v", err)
	}
	cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		return fail("cannot identify image file: %v", err)
	}
	if cfg.Width*cfg.Height > imageMaxDecode {
		return fail("image of %dx%d pixels exceeds the limit of %d pixels", cfg.Width, cfg.Height, imageMaxDecode)
	}
	if _, _, err := image.Decode(bytes.NewReader(b)); err != nil {
		return fail("image file is truncated or corrupt: %v", err)
	}
	n, err := ImageTokens(cfg.Width, cfg.Height)
	if err != nil {
		return fail("%v", err)
	}
	return imageInfo{tokens: n}
}
