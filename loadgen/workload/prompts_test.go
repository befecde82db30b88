package workload

import (
	"bytes"
	"encoding/base64"
	"image"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func mustLength(t *testing.T, spec string) Length {
	t.Helper()
	l, err := ParseLength("len", spec)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func mustPick(t *testing.T, spec string) Pick {
	t.Helper()
	p, err := ParsePick("pick", spec)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSharedPrefix: every request of a group starts with the same prefix
// of the length asked for (in the server's tokens, through the token
// conversion), then its own question; groups differ from the first word;
// the same seed gives the same prompts, another tag other prefixes.
func TestSharedPrefix(t *testing.T) {
	cfg := Config{Seed: 7, Input: mustLength(t, "fixed:20"), Output: mustLength(t, "fixed:5"),
		Tokens:       Tokens{TokensPerWord: 2, Overhead: 4},
		SharedPrefix: &SharedPrefix{Groups: 3, Tokens: mustLength(t, "fixed:100"), Pick: mustPick(t, "round-robin")}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := New(cfg)
	prefixes := map[int]string{}
	for i := 0; i < 9; i++ {
		r := w.Request(i)
		if r.PrefixGroup != i%3+1 || r.PrefixTokens != 100 || r.TargetInputTokens != 120 || r.MaxTokens != 5 {
			t.Fatalf("request %d: group %d prefix %d target %d max %d", i, r.PrefixGroup, r.PrefixTokens, r.TargetInputTokens, r.MaxTokens)
		}
		words := strings.Fields(r.Prompt)
		// 100 tokens at 2 per word: 50 words of prefix; (120 − 4) / 2 = 58
		// words in all.
		if len(words) != 58 || r.InputTokens != 58 {
			t.Fatalf("request %d: %d words (estimate %d), want 58", i, len(words), r.InputTokens)
		}
		prefix := strings.Join(words[:50], " ")
		if words[0] != "p"+string(rune('1'+i%3)) || words[50] != strconv.Itoa(i) {
			t.Fatalf("request %d: starts %q, question starts %q", i, words[0], words[50])
		}
		if p, ok := prefixes[r.PrefixGroup]; ok && p != prefix {
			t.Fatalf("request %d: group %d prefix differs from the group's first", i, r.PrefixGroup)
		}
		prefixes[r.PrefixGroup] = prefix
		if again := New(cfg).Request(i); again.Prompt != r.Prompt {
			t.Fatalf("request %d differs between two workloads of one seed", i)
		}
	}
	if prefixes[1] == prefixes[2] || prefixes[2] == prefixes[3] {
		t.Error("groups share a prefix")
	}
	v := w.WithVariant("rate=2")
	if r := v.Request(0); strings.HasPrefix(r.Prompt, prefixes[1]) || !strings.Contains(r.Prompt, "-p1 ") {
		t.Errorf("with a tag: %.40q… still starts with the untagged prefix", r.Prompt)
	}
}

// TestSharedPrefixPicks: uniform spreads requests evenly, zipf favours
// the first groups, round-robin cycles; each depends only on the seed and
// the index.
func TestSharedPrefixPicks(t *testing.T) {
	const n, groups = 4000, 8
	count := func(pick string) []int {
		cfg := Config{Seed: 3, Input: mustLength(t, "fixed:2"), Output: mustLength(t, "fixed:1"),
			SharedPrefix: &SharedPrefix{Groups: groups, Tokens: mustLength(t, "fixed:4"), Pick: mustPick(t, pick)}}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		w := New(cfg)
		c := make([]int, groups)
		for i := 0; i < n; i++ {
			g := w.group(i)
			if g2 := New(cfg).group(i); g2 != g {
				t.Fatalf("%s: request %d picks %d then %d", pick, i, g, g2)
			}
			c[g]++
		}
		return c
	}
	for g, c := range count("uniform") {
		if c < n/groups*8/10 || c > n/groups*12/10 {
			t.Errorf("uniform: group %d got %d of %d", g, c, n)
		}
	}
	z := count("zipf:1.5")
	// P(k) ∝ (k+1)^-1.5 over 8 groups: group 0 52 %, group 7 2.3 %.
	if z[0] < n*47/100 || z[0] > n*57/100 || z[7] > n*4/100 || z[0] <= z[1] || z[1] <= z[3] {
		t.Errorf("zipf:1.5: %v", z)
	}
	for g, c := range count("round-robin") {
		if c != n/groups {
			t.Errorf("round-robin: group %d got %d", g, c)
		}
	}
}

func TestSharedPrefixValidation(t *testing.T) {
	for _, tc := range []struct {
		spec, want string
	}{
		{"zipf:1", "above 1"}, {"zipf:x", "above 1"}, {"uniform:2", "no parameter"}, {"lru", "want uniform, zipf:S or round-robin"},
	} {
		if _, err := ParsePick("--shared-prefix.pick", tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--shared-prefix.pick") {
			t.Errorf("%q: %v, want %q", tc.spec, err, tc.want)
		}
	}
	if p := mustPick(t, "zipf"); p.S != 1.1 || p.String() != "zipf:1.1" {
		t.Errorf("zipf default: %+v", p)
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{SharedPrefix: &SharedPrefix{Groups: 0, Tokens: mustLength(t, "fixed:4")}}, "SharedPrefixGroups must be 1 to"},
		{Config{SharedPrefix: &SharedPrefix{Groups: 2}}, "SharedPrefixTokens is required"},
		{Config{Turns: 2, SharedPrefix: &SharedPrefix{Groups: 2, Tokens: mustLength(t, "fixed:4")}}, "Turns and SharedPrefixGroups cannot be combined"},
		{Config{Images: &Images{PerRequest: 0, URLs: []string{"x"}}}, "ImagesPerRequest must be 1 to 64"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// decodeDataURL decodes a data: URL's image.
func decodeDataURL(t *testing.T, u string) (image.Image, string) {
	t.Helper()
	head, b64, ok := strings.Cut(u, ";base64,")
	if !ok || !strings.HasPrefix(head, "data:image/") {
		t.Fatalf("not a base64 image data URL: %.40q", u)
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	img, format, err := image.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if "data:image/"+format != head {
		t.Fatalf("URL says %s, bytes are %s", head, format)
	}
	return img, format
}

// TestGeneratedImages: real PNG and JPEG files of the size asked for, the
// same for the same seed, different images in the pool; requests take
// them in turn.
func TestGeneratedImages(t *testing.T) {
	for _, format := range []string{ImagePNG, ImageJPEG} {
		spec := ImageSpec{Width: 64, Height: 40, Format: format, Distinct: 3, Seed: 9}
		im, err := NewGeneratedImages(spec, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(im.URLs) != 3 || im.URLs[0] == im.URLs[1] {
			t.Fatalf("%s: %d images, first two equal: %v", format, len(im.URLs), im.URLs[0] == im.URLs[1])
		}
		for _, u := range im.URLs {
			img, got := decodeDataURL(t, u)
			if got != format || img.Bounds().Dx() != 64 || img.Bounds().Dy() != 40 {
				t.Fatalf("%s: decoded a %s of %v", format, got, img.Bounds())
			}
		}
		again, _ := GenerateImages(spec)
		if again[2] != im.URLs[2] {
			t.Errorf("%s: the same seed gave another image", format)
		}
		w := New(Config{Input: mustLength(t, "fixed:3"), Output: mustLength(t, "fixed:1"), Images: im})
		r := w.Request(1) // images 2 and 3 mod 3 = 0
		if len(r.Images) != 2 || r.Images[0].URL != im.URLs[2] || r.Images[1].URL != im.URLs[0] {
			t.Errorf("%s: request 1's images are not pool images 2 and 0", format)
		}
		if im.Settings.Width != 64 || im.Settings.Distinct != 3 || im.Settings.PerRequest != 2 || im.Settings.Format != format {
			t.Errorf("settings %+v", im.Settings)
		}
	}
	if _, err := GenerateImages(ImageSpec{Width: 64, Height: 0, Format: ImagePNG, Distinct: 1}); err == nil || !strings.Contains(err.Error(), "ImageSize") {
		t.Errorf("zero height: %v", err)
	}
	if _, err := GenerateImages(ImageSpec{Width: 8, Height: 8, Format: "webp", Distinct: 1}); err == nil || !strings.Contains(err.Error(), "ImageFormat") {
		t.Errorf("webp: %v", err)
	}
	for _, s := range []string{"512", "0x5", "5x", "axb", "9000x1", "5x5x5"} {
		if _, _, err := ParseImageSize("--image.size", s); err == nil {
			t.Errorf("size %q accepted", s)
		}
	}
	if w, h, err := ParseImageSize("--image.size", "640X480"); err != nil || w != 640 || h != 480 {
		t.Errorf("640X480: %d %d %v", w, h, err)
	}
}

// TestImageFiles: files are sent as they are, typed by their content; a
// file that is no image is refused by name.
func TestImageFiles(t *testing.T) {
	dir := t.TempDir()
	png, _ := EncodeImage(ImageSpec{Width: 8, Height: 8, Format: ImagePNG}, 0)
	jpg, _ := EncodeImage(ImageSpec{Width: 8, Height: 4, Format: ImageJPEG}, 1)
	a, b, bad := filepath.Join(dir, "a.img"), filepath.Join(dir, "b.png"), filepath.Join(dir, "notes.png")
	for p, data := range map[string][]byte{a: png, b: jpg, bad: []byte("not an image")} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	im, err := NewFileImages([]string{a, b}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, f := decodeDataURL(t, im.URLs[0]); f != "png" {
		t.Errorf("a.img is %s", f)
	}
	if img, f := decodeDataURL(t, im.URLs[1]); f != "jpeg" || img.Bounds().Dy() != 4 {
		t.Errorf("b.png is %s %v", f, img.Bounds())
	}
	if im.Settings.Files != "a.img,b.png" || len(im.Settings.FilesSHA256) != 64 {
		t.Errorf("settings %+v", im.Settings)
	}
	if _, err := NewFileImages([]string{a, bad}, 1); err == nil || !strings.Contains(err.Error(), "notes.png") {
		t.Errorf("a text file: %v", err)
	}
}
