package gpusim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/internal/yamlerr"
)

// Scenario is a parsed and validated simulated fleet description.
type Scenario struct {
	Name, Description string

	source        string
	driverVersion string
	cudaVersion   int // NVML encoding: 12040 for 12.4
	callLatency   time.Duration
	devices       []*deviceSpec
	faults        []*faultSpec
	tenants       []*tenantSpec
	host          *hostSpec // nil: no CPU count or pressure (hoststats.go)
}

// Nodes lists the node names the scenario's devices are spread over, sorted;
// empty when no group names a node.
func (s *Scenario) Nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range s.devices {
		if d.node != "" && !seen[d.node] {
			seen[d.node] = true
			out = append(out, d.node)
		}
	}
	sort.Strings(out)
	return out
}

// DeviceCount is the number of GPUs the scenario describes (all nodes).
func (s *Scenario) DeviceCount() int { return len(s.devices) }

// deviceSpec is one GPU of a scenario, with its group's settings resolved.
type deviceSpec struct {
	model          *model
	group, inGroup int
	util           *signal // SM utilisation, percent
	memUtil        *signal // memory bandwidth utilisation, percent; nil: 0.6*util
	memUsed        *signal // percent of (total - reserved); nil: 0
	power          *signal // watts; nil: derived from util
	encUtil        *signal
	decUtil        *signal
	pcieRx, pcieTx *signal // MiB/s; nil: derived from util
	powerLimitW    float64
	ambientC       float64
	eccCorrPerHour float64
	eccUncPerHour  float64
	replaysPerHour float64
	xidPerHour     float64
	xidCodes       []uint64
	persistence    bool
	computeMode    nvml.ComputeMode
	remapped       rawRemapped
	node           string
	mig            []migProfile
	tenants        []*tenantSpec
	hostView
	probe probeSpec
	nvml  nvmlSpec // the per-process calls' behaviour (nvmlsettings.go)
	// price is USD per GPU-hour (price_usd_per_hour); hasPrice false: none.
	price    float64
	hasPrice bool
}

type faultKind int

const (
	faultXID faultKind = iota
	faultLost
	faultError
	faultSlow
	faultHang
)

var faultKinds = map[string]faultKind{
	"xid": faultXID, "lost": faultLost, "error": faultError, "slow": faultSlow, "hang": faultHang,
}

// faultSpec is one validated entry of the scenario's faults list. Times are
// seconds of sim time; until <= 0 means forever.
type faultSpec struct {
	kind   faultKind
	gpu    int
	xid    uint64
	at     float64
	every  float64
	call   string
	ret    nvml.Return
	delay  time.Duration
	from   float64
	until  float64
	source string // "faults[3]" for messages
}

func (f *faultSpec) activeAt(t float64) bool {
	return t >= f.from && (f.until <= 0 || t < f.until)
}

func (f *faultSpec) matches(call string, t float64) bool {
	return (f.call == "*" || f.call == call) && f.activeAt(t)
}

// ---- entry points ----

// Parse reads a scenario in the documented YAML format. source names the data
// in error messages ("my.yaml:12: devices[1].util.period: ...").
func Parse(data []byte, source string) (*Scenario, error) {
	l := &errList{source: source, lines: map[string]int{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line, msg := yamlerr.SplitLine(err.Error())
		l.addLine(line, "", "invalid YAML: "+msg)
		return nil, l.err()
	}
	if len(root.Content) == 0 {
		l.addLine(0, "", "empty scenario: expected a mapping with at least a devices list")
		return nil, l.err()
	}
	if root.Content[0].Kind != yaml.MappingNode {
		l.addLine(root.Content[0].Line, "", "scenario must be a YAML mapping (name, devices, faults, ...)")
		return nil, l.err()
	}
	byLine := map[int][]linePath{}
	indexLines(&root, "", l.lines, byLine)
	checkKnownFields(&root, reflect.TypeOf(rawScenario{}), "", l)
	if len(l.errs) > 0 {
		return nil, l.err()
	}

	var raw rawScenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				line, msg := yamlerr.SplitLine(e)
				l.addLine(line, pathForError(byLine[line], msg), msg)
			}
		} else {
			l.addLine(0, "", err.Error())
		}
		return nil, l.err()
	}
	sc := validate(&raw, l)
	if len(l.errs) > 0 {
		return nil, l.err()
	}
	sc.source = source
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(source), filepath.Ext(source))
	}
	return sc, nil
}

// Load returns a built-in scenario by name (see BuiltinNames), or else reads
// and parses the YAML file at nameOrPath.
func Load(nameOrPath string) (*Scenario, error) {
	if data, ok := builtinYAML(nameOrPath); ok {
		return Parse(data, nameOrPath+".yaml")
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("loading scenario %q (built-in scenarios: %s): %w",
			nameOrPath, strings.Join(BuiltinNames(), ", "), err)
	}
	return Parse(data, nameOrPath)
}

// ---- prices ----

// HasPrices reports whether any device of the scenario has a
// price_usd_per_hour.
func (s *Scenario) HasPrices() bool {
	for _, d := range s.devices {
		if d.hasPrice {
			return true
		}
	}
	return false
}

// PriceUSDPerHour is the scenario's price of the fleet's GPU with the UUID
// (its device group's price_usd_per_hour); false when the GPU is not the
// fleet's or its group has no price.
func (f *Fleet) PriceUSDPerHour(uuid string) (float64, bool) {
	for _, d := range f.devices {
		if d.uuid == uuid {
			return d.spec.price, d.spec.hasPrice
		}
	}
	return 0, false
}
