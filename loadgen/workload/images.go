package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif" // files: DecodeConfig recognises GIF
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Images (Config.Images) are sent with every chat request as image_url
// content parts after the prompt, each as a data: URL of its bytes
// (base64), as OpenAI's chat API and vLLM take them: generated images of
// a given size, encoded as PNG or JPEG with the Go standard library and
// drawn from the seed, or the bytes of image files. Request i's k-th image
// is image (i × PerRequest + k) mod the number of images: the pool is
// built once, before the run, so that encoding never delays a send.

// Image formats of generated images.
const (
	ImagePNG  = "png"
	ImageJPEG = "jpeg"
)

// Images are the images of every request.
type Images struct {
	PerRequest int
	// URLs are the data: URLs of the pool, in order.
	URLs []string
	// Settings describe them in reports (NewGeneratedImages,
	// NewFileImages).
	Settings report.ImageSettings
	// pool are the URLs' content parts, encoded once (client.NewImage);
	// nil: encoded when sent.
	pool []client.Image
}

// encode encodes the pool's content parts.
func (im *Images) encode() {
	im.pool = make([]client.Image, len(im.URLs))
	for j, u := range im.URLs {
		im.pool[j] = client.NewImage(u)
	}
}

// NewGeneratedImages returns perRequest generated images per request
// from a pool of spec.Distinct (GenerateImages).
func NewGeneratedImages(spec ImageSpec, perRequest int) (*Images, error) {
	if err := (&Images{PerRequest: perRequest, URLs: []string{""}}).validate(); err != nil {
		return nil, err // before the work of generating them
	}
	urls, err := GenerateImages(spec)
	if err != nil {
		return nil, err
	}
	im := &Images{PerRequest: perRequest, URLs: urls, Settings: report.ImageSettings{PerRequest: perRequest,
		Width: spec.Width, Height: spec.Height, Format: spec.Format, Distinct: spec.Distinct}}
	im.encode()
	err = im.validate()
	return im, err
}

// NewFileImages returns perRequest images per request from the files at
// paths, used in turn (LoadImageFiles).
func NewFileImages(paths []string, perRequest int) (*Images, error) {
	if err := (&Images{PerRequest: perRequest, URLs: []string{""}}).validate(); err != nil {
		return nil, err
	}
	f, err := LoadImageFiles(paths)
	if err != nil {
		return nil, err
	}
	im := &Images{PerRequest: perRequest, URLs: f.URLs, Settings: report.ImageSettings{PerRequest: perRequest,
		Files: strings.Join(f.Names, ","), FilesSHA256: f.SHA256}}
	im.encode()
	err = im.validate()
	return im, err
}

// ImageSpec describes generated images.
type ImageSpec struct {
	Width, Height int
	Format        string // ImagePNG or ImageJPEG
	Distinct      int    // how many different images (the pool)
	Seed          int64
}

// Limits of generated images.
const (
	maxImageSide     = 8192
	maxImageDistinct = 4096
	maxImagesPerReq  = 64
	// maxImagePoolBytes bounds the encoded pool (generated or read).
	maxImagePoolBytes = 512 << 20
)

// ParseImageSize parses "WxH" (e.g. "512x512"). name names the option.
func ParseImageSize(name option.Name, s string) (w, h int, err error) {
	a, b, ok := strings.Cut(strings.ToLower(s), "x")
	if ok {
		_, err1 := fmt.Sscanf(a, "%d", &w)
		_, err2 := fmt.Sscanf(b, "%d", &h)
		ok = err1 == nil && err2 == nil && fmt.Sprintf("%dx%d", w, h) == strings.ToLower(s)
	}
	if !ok || w < 1 || h < 1 || w > maxImageSide || h > maxImageSide {
		return 0, 0, option.Errorf("%s %q: want WIDTHxHEIGHT in pixels, each 1 to %d (e.g. 512x512)", name, s, maxImageSide)
	}
	return w, h, nil
}

// validateImages checks the images of a workload.
func (im *Images) validate() error {
	if im.PerRequest < 1 || im.PerRequest > maxImagesPerReq {
		return option.Errorf("%s must be 1 to %d, got %d", option.Name("ImagesPerRequest"), maxImagesPerReq, im.PerRequest)
	}
	if len(im.URLs) == 0 {
		return option.Errorf("%s: no images", option.Name("ImagesPerRequest"))
	}
	return nil
}

// images returns request i's images.
func (im *Images) images(i int) []client.Image {
	out := make([]client.Image, im.PerRequest)
	n := len(im.URLs)
	for k := range out {
		j := (i*im.PerRequest + k) % n
		if len(im.pool) == n {
			out[k] = im.pool[j]
		} else {
			out[k] = client.Image{URL: im.URLs[j]}
		}
	}
	return out
}

// GenerateImages encodes spec.Distinct images of spec's size and format,
// image j drawn with the seed and j: 16×16-pixel tiles of random colours
// with a little noise on every pixel, so that they compress neither to
// nothing nor not at all (a 512x512 PNG is about 370 KB, a JPEG at
// quality 90 about 24 KB).
func GenerateImages(spec ImageSpec) ([]string, error) {
	if spec.Width < 1 || spec.Height < 1 || spec.Width > maxImageSide || spec.Height > maxImageSide {
		return nil, option.Errorf("%s %dx%d: each side must be 1 to %d pixels", option.Name("ImageSize"), spec.Width, spec.Height, maxImageSide)
	}
	if spec.Distinct < 1 || spec.Distinct > maxImageDistinct {
		return nil, option.Errorf("%s must be 1 to %d, got %d", option.Name("ImageDistinct"), maxImageDistinct, spec.Distinct)
	}
	mime := ""
	switch spec.Format {
	case ImagePNG:
		mime = "image/png"
	case ImageJPEG:
		mime = "image/jpeg"
	default:
		return nil, option.Errorf("%s %q: want png or jpeg", option.Name("ImageFormat"), spec.Format)
	}
	// An image of w × h pixels encodes to at most about 4 × w × h bytes
	// (RGBA, uncompressed): refuse a pool that could not fit before
	// encoding it.
	if est := int64(spec.Width) * int64(spec.Height) * int64(spec.Distinct); est > maxImagePoolBytes {
		return nil, option.Errorf("%s × %s: %d images of %dx%d pixels are too many (at most %d MiB of pixels); ask for fewer or smaller ones",
			option.Name("ImageDistinct"), option.Name("ImageSize"), spec.Distinct, spec.Width, spec.Height, maxImagePoolBytes>>20)
	}
	// Encoded on every CPU: a 512x512 PNG takes tens of milliseconds.
	out := make([]string, spec.Distinct)
	errs := make([]error, spec.Distinct)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for j := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			b, err := EncodeImage(spec, j)
			out[j], errs[j] = dataURL(mime, b), err
		}()
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// EncodeImage encodes image j of spec.
func EncodeImage(spec ImageSpec, j int) ([]byte, error) {
	rng := rand.New(rand.NewPCG(uint64(spec.Seed)^0x1a6e_0000_0000, uint64(j)))
	img := image.NewRGBA(image.Rect(0, 0, spec.Width, spec.Height))
	const tile = 16
	tw := (spec.Width + tile - 1) / tile
	base := make([]color.RGBA, tw)
	for y := 0; y < spec.Height; y++ {
		if y%tile == 0 {
			for t := range base {
				base[t] = color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255}
			}
		}
		for x := 0; x < spec.Width; x++ {
			c := base[x/tile]
			n := uint8(rng.IntN(8))
			img.SetRGBA(x, y, color.RGBA{c.R ^ n, c.G ^ n, c.B ^ n, 255})
		}
	}
	var buf bytes.Buffer
	var err error
	if spec.Format == ImageJPEG {
		err = jpeg.Encode(&buf, img, &jpeg.Options{Quality: 90})
	} else {
		err = (&png.Encoder{CompressionLevel: png.BestSpeed}).Encode(&buf, img)
	}
	if err != nil {
		return nil, fmt.Errorf("encoding image %d: %w", j, err)
	}
	return buf.Bytes(), nil
}

// dataURL is the data: URL of b.
func dataURL(mime string, b []byte) string {
	return "data:" + mime + ";base64," + base64.StdEncoding.EncodeToString(b)
}

// ImageFiles are image files read for a workload.
type ImageFiles struct {
	URLs []string
	// Names are the files' base names in order; SHA256 hashes the
	// files' own SHA-256 hashes in that order.
	Names  []string
	SHA256 string
}

// LoadImageFiles reads PNG, JPEG or GIF files as data: URLs. A file that
// is not one of those (by its content, not its name) is refused, naming
// it.
func LoadImageFiles(paths []string) (*ImageFiles, error) {
	out := &ImageFiles{}
	all := sha256.New()
	total := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading image: %w", err)
		}
		_, format, err := image.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("image %s: not a PNG, JPEG or GIF image: %w", p, err)
		}
		if total += len(b); total > maxImagePoolBytes {
			return nil, fmt.Errorf("image %s: the images take over %d MiB", p, maxImagePoolBytes>>20)
		}
		sum := sha256.Sum256(b)
		all.Write(sum[:])
		out.URLs = append(out.URLs, dataURL("image/"+format, b))
		out.Names = append(out.Names, filepath.Base(p))
	}
	out.SHA256 = hex.EncodeToString(all.Sum(nil))
	return out, nil
}
