package collector

import (
	"sort"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// dcgmView converts snapshots.
type dcgmView struct {
	s        *Sampler
	hostname string
	fallback bool

	mu sync.Mutex
	// known is each GPU as the view last saw it up, by index: a GPU that
	// is down (one that fell off the bus, XID 79, is down from then on)
	// keeps its XID series for these entities.
	known map[string]dcgmKnown
}

func newDCGMView(s *Sampler, opts DCGMOptions) *dcgmView {
	return &dcgmView{s: s, hostname: opts.Hostname, fallback: opts.ProfFallback, known: map[string]dcgmKnown{}}
}

// dcgmGPU is what the view knows of one GPU from the snapshot.
type dcgmGPU struct {
	uuid, pciBusID, model, driver string
	mig                           bool
}

// dcgmKnown is a GPU's identity and entities when it was last up.
type dcgmKnown struct {
	gpu      dcgmGPU
	entities []dcgmEntity
}

// dcgmEntity is what dcgm-exporter watches: a GPU, or one GPU instance of
// a GPU in MIG mode; with the pod it is allocated to, if any.
type dcgmEntity struct {
	mig *dcgmMIG
	pod *dcgmPod
}

// dcgmMIG is one GPU instance: its profile and id.
type dcgmMIG struct {
	profile, gi string
}

type dcgmPod struct{ namespace, pod, container string }

func (p dcgmPod) less(q dcgmPod) bool {
	if p.namespace != q.namespace {
		return p.namespace < q.namespace
	}
	if p.pod != q.pod {
		return p.pod < q.pod
	}
	return p.container < q.container
}

// dcgmMIGDevice is one MIG device (a GPU instance and compute instance) of
// the snapshot.
type dcgmMIGDevice struct {
	gpu, gi, profile string
}

// dcgmValue is one converted whole-GPU value.
type dcgmValue struct {
	f *dcgmField
	v float64
}

// dcgmSnapshot is what convert reads from one snapshot.
type dcgmSnapshot struct {
	gpus map[string]*dcgmGPU
	down []string // GPUs with gpulens_gpu_up 0
	// values of each GPU, by index.
	values map[string][]dcgmValue
	// ratios are the native utilisation ratios of each GPU (fallbacks).
	ratios map[string]map[*prometheus.Desc]float64
	// migs: MIG devices by mig_uuid; their values and memory.
	migs              map[string]dcgmMIGDevice
	migValues         map[string][]dcgmValue
	migTotal, migUsed map[string]float64
	pods              map[[2]string]dcgmPod // by gpu, mig_uuid
}

// convert appends the DCGM series of a snapshot to out. It is called by
// the exposition under its render lock, and by live gathers.
func (v *dcgmView) convert(snap *Snapshot, out []prometheus.Metric) []prometheus.Metric {
	s := readDCGMSnapshot(snap)
	v.mu.Lock()
	defer v.mu.Unlock()
	indexes := make([]string, 0, len(s.gpus))
	for index, g := range s.gpus {
		if g.uuid != "" {
			indexes = append(indexes, index)
		}
	}
	sort.Strings(indexes)
	for _, index := range indexes {
		g := s.gpus[index]
		ents := s.entities(index, g)
		v.known[index] = dcgmKnown{gpu: *g, entities: ents}
		whole := len(ents) == 1 && ents[0].mig == nil
		have := map[*dcgmField]bool{}
		for _, val := range s.values[index] {
			have[val.f] = true
			switch {
			case val.f.scope == dcgmDevice:
				for _, e := range ents {
					out = v.emit(out, val.f, index, g, e, val.v, "")
				}
			case whole:
				out = v.emit(out, val.f, index, g, ents[0], val.v, "")
			}
		}
		if !whole {
			out = s.appendMIG(v, out, index, g, ents)
		}
		if v.fallback && whole {
			for _, f := range dcgmFieldOrder {
				fb, ok := dcgmFallbacks[f]
				if !ok || have[f] {
					continue
				}
				if r, ok := s.ratios[index][fb.native]; ok {
					out = v.emit(out, f, index, g, ents[0], r, fb.source)
				}
			}
		}
		out = v.appendXID(out, index, g, ents)
	}
	// A GPU that is down (lost, hung): its last XID under its identity
	// (the sampler keeps it), for the entities it had when the view last
	// saw it up (the whole GPU if never), so that an alert on the XID
	// value fires for it.
	for _, index := range s.down {
		g := v.identity(index)
		if g == nil {
			continue
		}
		ents := []dcgmEntity{{}}
		if k, ok := v.known[index]; ok && k.gpu.uuid == g.uuid {
			ents = k.entities
		}
		out = v.appendXID(out, index, g, ents)
	}
	return out
}

// identity is GPU index's identity as the sampler read it, or nil.
func (v *dcgmView) identity(index string) *dcgmGPU {
	i, err := strconv.Atoi(index)
	if err != nil {
		return nil
	}
	m := v.s.identity(i)
	if m == nil {
		return nil
	}
	var dm dto.Metric
	if m.Write(&dm) != nil {
		return nil
	}
	g := &dcgmGPU{}
	for _, lp := range dm.GetLabel() {
		switch lp.GetName() {
		case "uuid":
			g.uuid = lp.GetValue()
		case "pci_bus_id":
			g.pciBusID = lp.GetValue()
		case "name":
			g.model = lp.GetValue()
		case "driver_version":
			g.driver = lp.GetValue()
		}
	}
	return g
}

// readDCGMSnapshot collects the native series the view converts.
func readDCGMSnapshot(snap *Snapshot) *dcgmSnapshot {
	s := &dcgmSnapshot{
		gpus: map[string]*dcgmGPU{}, values: map[string][]dcgmValue{}, ratios: map[string]map[*prometheus.Desc]float64{},
		migs: map[string]dcgmMIGDevice{}, migValues: map[string][]dcgmValue{},
		migTotal: map[string]float64{}, migUsed: map[string]float64{}, pods: map[[2]string]dcgmPod{},
	}
	var dm dto.Metric
	label := func(name string) string {
		for _, lp := range dm.GetLabel() {
			if lp.GetName() == name {
				return lp.GetValue()
			}
		}
		return ""
	}
	value := func() float64 {
		if c := dm.GetCounter(); c != nil {
			return c.GetValue()
		}
		return dm.GetGauge().GetValue()
	}
	gpu := func(index string) *dcgmGPU {
		g := s.gpus[index]
		if g == nil {
			g = &dcgmGPU{}
			s.gpus[index] = g
		}
		return g
	}
	for _, m := range snap.Metrics {
		d := m.Desc()
		src, isGPU := dcgmGPUSources[d]
		migField, isMIG := dcgmMIGSources[d]
		switch {
		case isGPU, isMIG, d == gpuInfoDesc, d == gpuUpDesc, d == migEnabledDesc, d == migInfoDesc,
			d == migMemUsedDesc, d == migMemTotalDesc, d == allocInfoDesc:
		default:
			continue
		}
		dm.Reset()
		if m.Write(&dm) != nil {
			continue
		}
		index := label("gpu")
		switch {
		case isGPU:
			f := src.to[label(src.label)]
			if src.label == "" {
				f = src.to[""]
			}
			if f != nil {
				s.values[index] = append(s.values[index], dcgmValue{f: f, v: src.conv(value())})
			}
			if _, ok := dcgmFallbackNative[d]; ok {
				if s.ratios[index] == nil {
					s.ratios[index] = map[*prometheus.Desc]float64{}
				}
				s.ratios[index][d] = value()
			}
		case isMIG:
			s.migValues[label("mig_uuid")] = append(s.migValues[label("mig_uuid")], dcgmValue{f: migField, v: value()})
		case d == gpuInfoDesc:
			g := gpu(index)
			g.uuid, g.pciBusID, g.model, g.driver = label("uuid"), label("pci_bus_id"), label("name"), label("driver_version")
		case d == gpuUpDesc:
			if value() == 0 {
				s.down = append(s.down, index)
			}
		case d == migEnabledDesc:
			gpu(index).mig = value() == 1
		case d == migInfoDesc:
			s.migs[label("mig_uuid")] = dcgmMIGDevice{gpu: index, gi: label("gpu_instance_id"), profile: label("profile")}
		case d == migMemUsedDesc:
			s.migUsed[label("mig_uuid")] = value()
		case d == migMemTotalDesc:
			s.migTotal[label("mig_uuid")] = value()
		case d == allocInfoDesc:
			k := [2]string{index, label("mig_uuid")}
			p := dcgmPod{label("namespace"), label("pod"), label("container")}
			if cur, ok := s.pods[k]; !ok || p.less(cur) {
				s.pods[k] = p
			}
		}
	}
	sort.Strings(s.down)
	return s
}

// dcgmFallbackNative are the native families the fallbacks read.
var dcgmFallbackNative = map[*prometheus.Desc]bool{}

func init() {
	for _, fb := range dcgmFallbacks {
		dcgmFallbackNative[fb.native] = true
	}
}

// entities are the GPU's entities as dcgm-exporter's default (flex) mode
// watches them: one per GPU instance of a GPU in MIG mode that has any,
// by instance id, else the GPU. The pod of each: one, as dcgm-exporter
// maps a device to a pod (without --kubernetes-virtual-gpus); of several
// pods on a GPU or GPU instance (its compute instances), the first by
// namespace, pod and container.
func (s *dcgmSnapshot) entities(index string, g *dcgmGPU) []dcgmEntity {
	if g.mig {
		byGI := map[string]*dcgmEntity{}
		for uuid, m := range s.migs {
			if m.gpu != index {
				continue
			}
			e := byGI[m.gi]
			if e == nil {
				e = &dcgmEntity{mig: &dcgmMIG{profile: m.profile, gi: m.gi}}
				byGI[m.gi] = e
			}
			if p, ok := s.pods[[2]string{index, uuid}]; ok && (e.pod == nil || p.less(*e.pod)) {
				e.pod = &p
			}
		}
		if len(byGI) > 0 {
			out := make([]dcgmEntity, 0, len(byGI))
			for _, e := range byGI {
				out = append(out, *e)
			}
			sort.Slice(out, func(i, j int) bool { return giLess(out[i].mig.gi, out[j].mig.gi) })
			return out
		}
	}
	e := dcgmEntity{}
	if p, ok := s.pods[[2]string{index, ""}]; ok {
		e.pod = &p
	}
	return []dcgmEntity{e}
}

func giLess(a, b string) bool {
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if errA != nil || errB != nil {
		return a < b
	}
	return x < y
}

// appendMIG appends each GPU instance's own fields: its framebuffer (used;
// free as its total less used) and its PROF activity. A GPU instance with
// several compute instances has one value (they share its memory and GPM
// samples the GPU instance): the first MIG device's, by mig_uuid.
func (s *dcgmSnapshot) appendMIG(v *dcgmView, out []prometheus.Metric, index string, g *dcgmGPU, ents []dcgmEntity) []prometheus.Metric {
	uuids := make([]string, 0, len(s.migs))
	for uuid, m := range s.migs {
		if m.gpu == index {
			uuids = append(uuids, uuid)
		}
	}
	sort.Strings(uuids)
	for _, e := range ents {
		done := map[*dcgmField]bool{}
		put := func(f *dcgmField, x float64) {
			if !done[f] {
				done[f] = true
				out = v.emit(out, f, index, g, e, x, "")
			}
		}
		for _, uuid := range uuids {
			if s.migs[uuid].gi != e.mig.gi {
				continue
			}
			if used, ok := s.migUsed[uuid]; ok {
				put(dcgmFBUsed, dcgmMiBOf(used))
				if total, ok := s.migTotal[uuid]; ok {
					put(dcgmFBFree, dcgmMiBOf(total)-dcgmMiBOf(used))
				}
			}
			for _, val := range s.migValues[uuid] {
				put(val.f, val.v)
			}
		}
	}
	return out
}

// appendXID appends DCGM_FI_DEV_XID_ERRORS for each entity: the code of
// the GPU's latest XID (0 until the first since the exporter started),
// with dcgm-exporter's err_code and err_msg labels.
func (v *dcgmView) appendXID(out []prometheus.Metric, index string, g *dcgmGPU, ents []dcgmEntity) []prometheus.Metric {
	if v.s.xid == nil {
		return out
	}
	code, _ := v.s.xid.lastXID(index)
	for _, e := range ents {
		out = v.emit(out, dcgmXID, index, g, e, float64(code), "", strconv.FormatUint(code, 10), dcgmXIDMessage(code))
	}
	return out
}

// emit appends one series of f for entity e of the GPU; source, if not
// empty, is its gpulens_source label; extra are the values of f.extra.
func (v *dcgmView) emit(out []prometheus.Metric, f *dcgmField, index string, g *dcgmGPU, e dcgmEntity, x float64, source string, extra ...string) []prometheus.Metric {
	labels := make([]string, 0, len(dcgmBaseLabels)+len(dcgmMIGLabels)+len(dcgmPodLabels)+len(extra)+1)
	labels = append(labels, index, g.uuid, g.pciBusID, "nvidia"+index, g.model, v.hostname, g.driver)
	mig, pod, src := 0, 0, 0
	if e.mig != nil {
		labels = append(labels, e.mig.profile, e.mig.gi)
		mig = 1
	}
	if e.pod != nil {
		labels = append(labels, e.pod.namespace, e.pod.pod, e.pod.container)
		pod = 1
	}
	labels = append(labels, extra...)
	if source != "" {
		labels = append(labels, source)
		src = 1
	}
	return append(out, prometheus.MustNewConstMetric(f.descs[mig][pod][src], f.typ, x, labels...))
}
