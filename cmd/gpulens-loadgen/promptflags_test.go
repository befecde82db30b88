package main

import (
	"context"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// TestSharedPrefixAgainstSim: one user, 12 requests over 3 prefixes of
// 64 tokens, round robin. The first request of each group finds nothing
// cached (groups share less than a 16-token block: the template and the
// run's tag); every later one finds its prefix cached, in whole blocks,
// and the server says so in its usage. The report carries the settings,
// every request's cached tokens and group, and a measured hit ratio near
// the one expected.
func TestSharedPrefixAgainstSim(t *testing.T) {
	t.Parallel()
	target := startCachingSim(t)
	d, recs := runLoad(t, "run", "--target", target, "--concurrency", "1", "--requests", "12",
		"--shared-prefix.groups", "3", "--shared-prefix.tokens", "fixed:64", "--shared-prefix.pick", "round-robin")
	if len(d.Runs) != 1 || len(recs) != 12 {
		t.Fatalf("%d runs, %d records", len(d.Runs), len(recs))
	}
	run := d.Runs[0]
	if sp := run.Settings.SharedPrefix; sp.Groups != 3 || sp.Tokens != "fixed:64" || sp.Pick != "round-robin" {
		t.Errorf("settings %+v", sp)
	}
	for _, r := range recs {
		if r.PrefixGroup != r.Index%3+1 || r.PrefixTokens != 64 || r.CachedTokens == nil {
			t.Fatalf("request %d: group %d prefix %d cached %v", r.Index, r.PrefixGroup, r.PrefixTokens, r.CachedTokens)
		}
		c := *r.CachedTokens
		switch {
		case r.Index < 3 && c != 0:
			t.Errorf("request %d, its group's first: %d cached tokens, want 0", r.Index, c)
		case r.Index >= 3 && (c < 48 || c > 80 || c%16 != 0):
			// The template's 5 tokens and the ~64 of the prefix: 4 blocks.
			t.Errorf("request %d: %d cached tokens, want whole blocks covering its ~69-token prefix", r.Index, c)
		}
	}
	pc := run.PrefixCache
	if pc == nil || pc.Requests != 12 || pc.Reported != 12 || pc.RequestsWithHits != 9 || pc.Groups != 3 || pc.HitRatio == nil || pc.ExpectedHitRatio == nil {
		t.Fatalf("prefix cache %+v", pc)
	}
	// 9 of 12 prompts of ~64 + 16 + template tokens hit ~64: about 0.5.
	t.Logf("hit ratio %.3f, expected %.3f, cached %d of %d prompt tokens", *pc.HitRatio, *pc.ExpectedHitRatio, pc.CachedTokens, pc.PromptTokens)
	if math.Abs(*pc.HitRatio-*pc.ExpectedHitRatio) > 0.08 || *pc.ExpectedHitRatio < 0.4 || *pc.ExpectedHitRatio > 0.65 {
		t.Errorf("hit ratio %.3f, expected %.3f", *pc.HitRatio, *pc.ExpectedHitRatio)
	}
}

// TestImagesAgainstSim: two generated images in every request; the
// simulator charges each 64x64 image 6 tokens (2 × 2 tokens of 28-pixel
// patches, scaled up to its minimum, and 2 around them) and the report
// counts them.
func TestImagesAgainstSim(t *testing.T) {
	t.Parallel()
	target := startCachingSim(t)
	d, recs := runLoad(t, "run", "--target", target, "--concurrency", "2", "--requests", "4",
		"--image.count", "2", "--image.size", "64x64", "--image.format", "jpeg", "--image.distinct", "3")
	plain, plainRecs := runLoad(t, "run", "--target", target, "--concurrency", "2", "--requests", "4")
	run := d.Runs[0]
	if im := run.Settings.Images; im.PerRequest != 2 || im.Width != 64 || im.Height != 64 || im.Format != "jpeg" || im.Distinct != 3 {
		t.Errorf("settings %+v", im)
	}
	if run.Images == nil || run.Images.Images != 8 || run.Images.Requests != 4 || run.Images.PerRequest.Mean != 2 {
		t.Fatalf("images %+v", run.Images)
	}
	if plain.Runs[0].Images != nil {
		t.Errorf("a run without images counts %+v", plain.Runs[0].Images)
	}
	for i, r := range recs {
		if !r.OK() || r.Images != 2 {
			t.Fatalf("request %d: %s %s, %d images", r.Index, r.ErrorClass, r.Error, r.Images)
		}
		// The same text as without images (the same seed), 12 tokens more.
		if got := r.PromptTokens - plainRecs[i].PromptTokens; got != 12 {
			t.Errorf("request %d: %d prompt tokens, %d without images: want 12 more", r.Index, r.PromptTokens, plainRecs[i].PromptTokens)
		}
	}
	if d.Metadata.Manifest.SettingsHash == plain.Metadata.Manifest.SettingsHash {
		t.Error("images do not change the settings hash")
	}
}

func TestPromptFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notImage := filepath.Join(dir, "notes.png")
	if err := os.WriteFile(notImage, []byte("text"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shared-prefix.groups=-1"}, "--shared-prefix.groups must not be negative"},
		{[]string{"--shared-prefix.groups", "2", "--shared-prefix.tokens", "fixed"}, "--shared-prefix.tokens"},
		{[]string{"--shared-prefix.groups", "2", "--shared-prefix.pick", "zipf:0.5"}, `--shared-prefix.pick "zipf:0.5": Zipf's exponent must be a number above 1`},
		{[]string{"--shared-prefix.groups", "2", "--turns", "2"}, "--turns and --shared-prefix.groups cannot be combined"},
		{[]string{"--image.count", "1", "--image.size", "0x4"}, `--image.size "0x4"`},
		{[]string{"--image.count", "1", "--image.distinct", "0"}, "--image.distinct must be 1 to 4096, got 0"},
		{[]string{"--image.count", "65"}, "--image.count must be 1 to 64, got 65"},
		{[]string{"--image.file", notImage}, "--image.file: image " + notImage + ": not a PNG, JPEG or GIF image"},
		{[]string{"--image.count", "1", "--image.size", "8x8", "--endpoint", "completions"}, `--image.count: images need the chat endpoint (--endpoint "completions")`},
	} {
		app := kingpin.New("t", "")
		c := runCommand(app)
		args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--requests", "1", "--concurrency", "1"}, tc.args...)
		if _, err := app.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := c.run(context.Background(), slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}
