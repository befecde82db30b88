package report

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// Configuration is what SettingsHash hashes: a campaign's plan and the
// settings of its runs.
type Configuration struct {
	// Settings are a run's settings. SettingsHash leaves out what differs
	// between the runs of one campaign or does not shape the measurement:
	// the level (Concurrency, Rate: Levels has them), the shard index
	// (Shard: Shards counts them), the dataset's file name (Dataset: its
	// hash counts) and the prices (Cost).
	Settings Settings
	// Levels (users or requests per second) and Repeats are the plan;
	// Saturation its saturation rule, if any.
	Levels     []float64
	Repeats    int
	Saturation *Saturation
	// DatasetSHA256 is the dataset's hash ("" for synthetic prompts).
	DatasetSHA256 string
	// Shards is the number of workers the schedule is split over (1:
	// one process).
	Shards int
	// ContinuousUsage: the client asked for usage on every chunk.
	ContinuousUsage bool
}

// Saturation is a saturation search's rule.
type Saturation struct {
	MaxErrorRatio   float64 `json:"max_error_ratio"`
	MinGoodputRatio float64 `json:"min_goodput_ratio"`
}

// SettingsHash returns the hex SHA-256 of the canonical JSON of c (object
// keys sorted, no white space, numbers as encoding/json writes them): two
// campaigns with equal hashes sent the same workload the same way and
// measured it alike. Nothing about where or when is in it: not the target
// URL, the API key, the run ID, times, the prompt nonce, the scenario
// name, labels, outputs or the exporter.
func SettingsHash(c Configuration) (string, error) {
	s := c.Settings
	s.Concurrency, s.Rate, s.Shard, s.Dataset, s.Cost = 0, 0, "", "", CostSettings{}
	v := struct {
		Settings        Settings    `json:"settings"`
		Levels          []float64   `json:"levels"`
		Repeats         int         `json:"repeats"`
		Saturation      *Saturation `json:"saturation,omitempty"`
		DatasetSHA256   string      `json:"dataset_sha256,omitempty"`
		Shards          int         `json:"shards"`
		ContinuousUsage bool        `json:"continuous_usage,omitempty"`
	}{s, c.Levels, c.Repeats, c.Saturation, c.DatasetSHA256, max(c.Shards, 1), c.ContinuousUsage}
	b, err := Canonical(v)
	if err != nil {
		// A NaN or infinite number, which JSON cannot carry.
		return "", fmt.Errorf("hashing the settings: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// Canonical returns v as canonical JSON: encoded, then re-encoded from its
// generic form so that every object's keys are sorted, without white
// space or HTML escaping; numbers keep their encoded text.
func Canonical(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(g); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// Label limits.
const (
	maxLabelKey   = 128
	maxLabelValue = 1024
)

// ParseLabels parses key=value labels; an error starts with the label at
// fault, quoted. A key is 1 to 128 letters, digits,
// '_', '-', '.' or '/'; a value (possibly empty) at most 1024 bytes
// without control characters; a key given twice is refused.
func ParseLabels(specs []string) (map[string]string, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(specs))
	for _, spec := range specs {
		k, v, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want key=value", spec)
		}
		if k == "" || len(k) > maxLabelKey || strings.IndexFunc(k, func(r rune) bool {
			return !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("_-./", r)))
		}) >= 0 {
			return nil, fmt.Errorf("%q: the key must be 1 to %d letters, digits, '_', '-', '.' or '/'", spec, maxLabelKey)
		}
		if len(v) > maxLabelValue || strings.IndexFunc(v, unicode.IsControl) >= 0 {
			return nil, fmt.Errorf("%q: the value must be at most %d bytes without control characters", spec, maxLabelValue)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q: key %q given twice", spec, k)
		}
		out[k] = v
	}
	return out, nil
}
