package main

import (
	"fmt"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// promptFlags are the flags of the shared-prefix workload and of the
// images sent with each request, for run and sweep (docs/loadgen.md,
// "Shared prefixes" and "Images").
type promptFlags struct {
	prefixGroups int
	prefixTokens string
	prefixPick   string

	imageCount    int
	imageSize     string
	imageFormat   string
	imageDistinct int
	imageFiles    []string
}

func addPromptFlags(cmd *kingpin.CmdClause) *promptFlags {
	f := &promptFlags{}
	cmd.Flag("shared-prefix.groups", "Start every synthetic prompt with one of this many shared prefixes (a long system prompt or document many requests share, which a server's prefix cache keeps); --input-tokens is then the length of each request's own question after it (0: no shared prefix).").Default("0").IntVar(&f.prefixGroups)
	cmd.Flag("shared-prefix.tokens", "Length of each shared prefix in the server's tokens, drawn once per group: fixed:N, uniform:LO,HI, normal:MEAN,SD or lognormal:MEDIAN,SIGMA (as --input-tokens).").Default("fixed:1000").StringVar(&f.prefixTokens)
	cmd.Flag("shared-prefix.pick", "How a request picks its prefix, by the seed and its index: uniform, zipf:S (group k with probability ∝ 1/(k+1)^S, S > 1) or round-robin.").Default(workload.PickUniform).StringVar(&f.prefixPick)
	cmd.Flag("image.count", "Images in every chat request, as image_url content parts after the prompt (0: none; 1 when --image.file is given).").Default("0").IntVar(&f.imageCount)
	cmd.Flag("image.size", "Size of the generated images, WIDTHxHEIGHT in pixels.").Default("512x512").StringVar(&f.imageSize)
	cmd.Flag("image.format", "Encoding of the generated images: png or jpeg.").Default(workload.ImagePNG).EnumVar(&f.imageFormat, workload.ImagePNG, workload.ImageJPEG)
	cmd.Flag("image.distinct", "How many different images are generated (from --seed) before the run; requests take them in turn.").Default("16").IntVar(&f.imageDistinct)
	cmd.Flag("image.file", "Send this PNG, JPEG or GIF file instead of generated images (repeatable: requests take the files in turn).").PlaceHolder("FILE").StringsVar(&f.imageFiles)
	return f
}

// apply sets the shared prefixes and images of o.Workload.
func (f *promptFlags) apply(o *campaign.Options) error {
	if f.prefixGroups < 0 {
		return fmt.Errorf("--shared-prefix.groups must not be negative, got %d", f.prefixGroups)
	}
	if f.prefixGroups > 0 {
		l, err := workload.ParseLength("--shared-prefix.tokens", f.prefixTokens)
		if err != nil {
			return err
		}
		p, err := workload.ParsePick("--shared-prefix.pick", f.prefixPick)
		if err != nil {
			return err
		}
		o.Workload.SharedPrefix = &workload.SharedPrefix{Groups: f.prefixGroups, Tokens: l, Pick: p}
	}
	if f.imageCount < 0 {
		return fmt.Errorf("--image.count must not be negative, got %d", f.imageCount)
	}
	count := f.imageCount
	if count == 0 && len(f.imageFiles) > 0 {
		count = 1
	}
	if count == 0 {
		return nil
	}
	var (
		im  *workload.Images
		err error
	)
	if len(f.imageFiles) > 0 {
		im, err = workload.NewFileImages(f.imageFiles, count)
		if err != nil {
			return fmt.Errorf("--image.file: %w", err)
		}
	} else {
		w, h, err := workload.ParseImageSize("--image.size", f.imageSize)
		if err != nil {
			return err
		}
		im, err = workload.NewGeneratedImages(workload.ImageSpec{Width: w, Height: h, Format: f.imageFormat,
			Distinct: f.imageDistinct, Seed: o.Workload.Seed}, count)
		if err != nil {
			return flagged(loadFlagNames, err)
		}
	}
	o.Workload.Images = im
	return nil
}
