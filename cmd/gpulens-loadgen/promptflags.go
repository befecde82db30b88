package main

import (
	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
)

// addPromptFlags declares the flags of the shared-prefix workload and of
// the images sent with each request, for run, sweep and search
// (docs/loadgen.md, "Shared prefixes" and "Images").
func addPromptFlags(cmd *kingpin.CmdClause, s *campaign.Settings) {
	d := campaign.DefaultSettings()
	cmd.Flag("shared-prefix.groups", "Start every synthetic prompt with one of this many shared prefixes (a long system prompt or document many requests share, which a server's prefix cache keeps); --input-tokens is then the length of each request's own question after it (0: no shared prefix).").Default("0").IntVar(&s.SharedPrefixGroups)
	cmd.Flag("shared-prefix.tokens", "Length of each shared prefix in the server's tokens, drawn once per group: fixed:N, uniform:LO,HI, normal:MEAN,SD or lognormal:MEDIAN,SIGMA (as --input-tokens).").Default("fixed:1000").StringVar(&s.SharedPrefixTokens)
	cmd.Flag("shared-prefix.pick", "How a request picks its prefix, by the seed and its index: uniform, zipf:S (group k with probability ∝ 1/(k+1)^S, S > 1) or round-robin.").Default(d.SharedPrefixPick).StringVar(&s.SharedPrefixPick)
	cmd.Flag("image.count", "Images in every chat request, as image_url content parts after the prompt (0: none; 1 when --image.file is given).").Default("0").IntVar(&s.ImagesPerRequest)
	cmd.Flag("image.size", "Size of the generated images, WIDTHxHEIGHT in pixels.").Default("512x512").StringVar(&s.ImageSize)
	cmd.Flag("image.format", "Encoding of the generated images: png or jpeg.").Default(d.ImageFormat).EnumVar(&s.ImageFormat, campaign.Choices("ImageFormat")...)
	cmd.Flag("image.distinct", "How many different images are generated (from --seed) before the run; requests take them in turn.").Default("16").IntVar(&s.ImageDistinct)
	cmd.Flag("image.file", "Send this PNG, JPEG or GIF file instead of generated images (repeatable: requests take the files in turn).").PlaceHolder("FILE").StringsVar(&s.ImageFiles)
}
