package deploy

// The switches of the deployments: the continuous probe (--collector.probe)
// and the DCGM-compatible view (--compat.dcgm), each off by default and
// turned on by one switch in every deployment (Helm value, kustomize
// component, compose override file, systemd drop-in). The checks below fail
// when a switch is on without what it needs, and the comparisons fail when a
// switch changes anything but its own fields.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	composetypes "github.com/compose-spec/compose-go/v2/types"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const (
	// probeMemoryLimit is the memory limit of an exporter running the
	// probe: about 180 MiB measured at a probe's peak plus a margin for
	// what only a GPU shows (deploy/README.md, "The probe").
	probeMemoryLimit = 512 << 20
	// probeMemoryRequest: the exporter between probes, libcuda loaded.
	probeMemoryRequest = 128 << 20
	// The probe's PTX JIT cache: CUDA_CACHE_PATH on a writable volume
	// (the root file systems are read-only), CUDA_CACHE_MAXSIZE bytes.
	jitCacheVolume  = "jit-cache"
	jitCachePath    = "/var/cache/gpulens-jit"
	jitCacheMaxSize = "33554432"
	jitCacheLimit   = 64 << 20
	// dcgmPort is dcgm-exporter's port, where the compat view listens.
	dcgmPort = 9400
	// dcgmJob is the job of the compat view's series.
	dcgmJob = "gpulens-dcgm"
)

// boolFlag reports whether the kingpin boolean flag name is on in args (the
// last occurrence wins, as kingpin parses).
func boolFlag(args []string, name string) bool {
	on := false
	for _, a := range args {
		switch a {
		case "--" + name, "--" + name + "=true":
			on = true
		case "--no-" + name, "--" + name + "=false":
			on = false
		}
	}
	return on
}

// flagValue is the value of the last --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	v, ok := "", false
	for _, a := range args {
		if s, found := strings.CutPrefix(a, "--"+name+"="); found {
			v, ok = s, true
		}
	}
	return v, ok
}

// driverCapabilities splits NVIDIA_DRIVER_CAPABILITIES; "all" gives every one.
func driverCapabilities(v string) map[string]bool {
	caps := map[string]bool{}
	for _, c := range strings.Split(v, ",") {
		if c = strings.TrimSpace(c); c != "" {
			caps[c] = true
		}
	}
	if caps["all"] {
		caps["compute"], caps["utility"] = true, true
	}
	return caps
}

// capabilityProblems checks NVIDIA_DRIVER_CAPABILITIES against the probe
// switch: with the probe, compute (libcuda.so.1, the PTX JIT, and
// /dev/nvidia-uvm read-write: the NVIDIA container toolkit adds the UVM
// devices only for compute) and utility (NVML); without it, utility alone.
func capabilityProblems(probe bool, value string) []string {
	caps := driverCapabilities(value)
	switch {
	case probe && (!caps["compute"] || !caps["utility"]):
		return []string{fmt.Sprintf("--collector.probe with NVIDIA_DRIVER_CAPABILITIES=%q: want compute,utility (libcuda.so.1 and read-write /dev/nvidia-uvm come with compute)", value)}
	case !probe && value != "utility":
		return []string{fmt.Sprintf("no probe, NVIDIA_DRIVER_CAPABILITIES=%q: want utility (NVML only)", value)}
	}
	return nil
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

// exporterEnvProblems checks the environment every exporter container has:
// every GPU from the NVIDIA runtime, and the node's name (--cost.node and
// the DCGM view's Hostname label read NODE_NAME).
func exporterEnvProblems(c corev1.Container) []string {
	var out []string
	if e, _ := envValue(c, "NVIDIA_VISIBLE_DEVICES"); e.Value != "all" {
		out = append(out, fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%q; want all", e.Value))
	}
	if e, ok := envValue(c, "NODE_NAME"); !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		out = append(out, fmt.Sprintf("NODE_NAME %+v; want it from the field spec.nodeName", e))
	}
	return out
}

// probeProblems lists what an exporter container lacks for its probe
// switch: the driver capabilities, and with the probe a memory limit of at
// least probeMemoryLimit and a request no larger than the limit.
func probeProblems(c corev1.Container) []string {
	probe := boolFlag(c.Args, "collector.probe")
	e, _ := envValue(c, "NVIDIA_DRIVER_CAPABILITIES")
	out := capabilityProblems(probe, e.Value)
	if !probe {
		return out
	}
	lim, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok || lim.Value() < probeMemoryLimit {
		out = append(out, fmt.Sprintf("--collector.probe with a memory limit of %s: want at least %s (libcuda, the JIT and the pinned buffers)", lim.String(), resource.NewQuantity(probeMemoryLimit, resource.BinarySI)))
	}
	if req, ok := c.Resources.Requests[corev1.ResourceMemory]; !ok || req.Cmp(lim) > 0 {
		out = append(out, fmt.Sprintf("--collector.probe with a memory request of %s over the limit %s", req.String(), lim.String()))
	}
	return out
}

// jitCacheProblems checks the probe's JIT cache in a pod: with the probe,
// CUDA_CACHE_PATH and CUDA_CACHE_MAXSIZE set, and CUDA_CACHE_PATH on a
// writable mount of an emptyDir of at most jitCacheLimit (the root file
// system is read-only: without it the driver JIT-compiles the probe's PTX
// on every run); without the probe, none of it.
func jitCacheProblems(spec corev1.PodSpec, c corev1.Container) []string {
	probe := boolFlag(c.Args, "collector.probe")
	path, hasPath := envValue(c, "CUDA_CACHE_PATH")
	size, hasSize := envValue(c, "CUDA_CACHE_MAXSIZE")
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.Name == jitCacheVolume {
			mount = &c.VolumeMounts[i]
		}
	}
	var vol *corev1.Volume
	for i, v := range spec.Volumes {
		if v.Name == jitCacheVolume {
			vol = &spec.Volumes[i]
		}
	}
	if !probe {
		if hasPath || hasSize || mount != nil || vol != nil {
			return []string{fmt.Sprintf("no probe, but CUDA_CACHE_PATH %q, CUDA_CACHE_MAXSIZE %q, mount %v, volume %v", path.Value, size.Value, mount != nil, vol != nil)}
		}
		return nil
	}
	var out []string
	if !hasPath || path.Value != jitCachePath || !hasSize || size.Value != jitCacheMaxSize {
		out = append(out, fmt.Sprintf("--collector.probe with CUDA_CACHE_PATH=%q CUDA_CACHE_MAXSIZE=%q: want %s and %s (the PTX JIT's cache)", path.Value, size.Value, jitCachePath, jitCacheMaxSize))
	}
	switch {
	case mount == nil:
		out = append(out, fmt.Sprintf("--collector.probe without a %s mount: the read-only root file system leaves the JIT no cache", jitCacheVolume))
	case mount.ReadOnly || mount.MountPath != jitCachePath:
		out = append(out, fmt.Sprintf("JIT cache mount %+v: want %s writable", *mount, jitCachePath))
	}
	switch {
	case vol == nil || vol.EmptyDir == nil:
		out = append(out, fmt.Sprintf("JIT cache volume %v: want an emptyDir", vol))
	case vol.EmptyDir.SizeLimit == nil || vol.EmptyDir.SizeLimit.Value() > jitCacheLimit:
		out = append(out, fmt.Sprintf("JIT cache emptyDir size limit %v: want at most %d", vol.EmptyDir.SizeLimit, jitCacheLimit))
	}
	return out
}

// listenPort is the port of a listen address such as ":9400".
func listenPort(addr string) (int, bool) {
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return 0, false
	}
	p, err := strconv.Atoi(addr[i+1:])
	return p, err == nil && p > 0
}

// dcgmCompatProblems checks the DCGM-compatible view's switch: on, the
// exporter listens on dcgmPort, the container, the Service and the
// ServiceMonitor have a port dcgm-compat for it and the endpoint names its
// job dcgmJob; off, none of them.
func dcgmCompatProblems(c corev1.Container, svc *corev1.Service, sm *monitoringv1.ServiceMonitor) []string {
	addr, hasAddr := flagValue(c.Args, "compat.dcgm.listen-address")
	on := boolFlag(c.Args, "compat.dcgm") || (hasAddr && addr != "")
	cport, hasCPort := portNamed(c, "dcgm-compat")
	var sport *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == "dcgm-compat" {
			sport = &svc.Spec.Ports[i]
		}
	}
	var ep *monitoringv1.Endpoint
	for i := range sm.Spec.Endpoints {
		if sm.Spec.Endpoints[i].Port == "dcgm-compat" {
			ep = &sm.Spec.Endpoints[i]
		}
	}
	if !on {
		if hasAddr || hasCPort || sport != nil || ep != nil {
			return []string{fmt.Sprintf("DCGM view off (args %v) but listen address %q, container port %v, Service port %+v, ServiceMonitor endpoint %+v", c.Args, addr, hasCPort, sport, ep)}
		}
		return nil
	}
	var out []string
	if p, ok := listenPort(addr); !ok || p != dcgmPort || !hasCPort || cport != dcgmPort {
		out = append(out, fmt.Sprintf("DCGM view: --compat.dcgm.listen-address=%q and container port dcgm-compat %d (%v); want both on %d", addr, cport, hasCPort, dcgmPort))
	}
	switch {
	case sport == nil:
		out = append(out, "DCGM view: no Service port dcgm-compat")
	case sport.Port != dcgmPort || sport.TargetPort != intstr.FromString("dcgm-compat"):
		out = append(out, fmt.Sprintf("DCGM view: Service port %+v; want dcgm-compat %d -> dcgm-compat", *sport, dcgmPort))
	}
	switch {
	case ep == nil:
		out = append(out, "DCGM view: no ServiceMonitor endpoint on port dcgm-compat")
		return out
	case ep.Path != "/metrics":
		out = append(out, fmt.Sprintf("DCGM view: ServiceMonitor endpoint path %q; want /metrics", ep.Path))
	}
	job := ""
	for _, r := range ep.RelabelConfigs {
		if r.TargetLabel == "job" && len(r.SourceLabels) == 0 && r.Replacement != nil {
			job = *r.Replacement
		}
	}
	if job != dcgmJob {
		out = append(out, fmt.Sprintf("DCGM view: the endpoint's job is %q; want %s (up{job=\"gpulens-exporter\"} one target per node)", job, dcgmJob))
	}
	return out
}

// exporterOf returns the one exporter container of o's DaemonSet.
func exporterOf(t *testing.T, o *objects) *corev1.Container {
	t.Helper()
	if len(o.daemonSets) != 1 || len(o.daemonSets[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one DaemonSet with one container")
	}
	return &o.daemonSets[0].Spec.Template.Spec.Containers[0]
}

// TestSwitchChecksFail shows that the checks above reject a deployment that
// turns a switch on without what it needs, starting from the kustomize base
// with both components (which passes).
func TestSwitchChecksFail(t *testing.T) {
	good := kustomizeBuild(t, "probe", "dcgm-compat")
	for _, tc := range []struct {
		name   string
		mutate func(c *corev1.Container, svc *corev1.Service, sm *monitoringv1.ServiceMonitor)
		want   string // "" passes
	}{
		{"as built", func(*corev1.Container, *corev1.Service, *monitoringv1.ServiceMonitor) {}, ""},
		{"utility only", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			setEnv(c, "NVIDIA_DRIVER_CAPABILITIES", "utility")
		}, "want compute,utility"},
		{"compute only", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			setEnv(c, "NVIDIA_DRIVER_CAPABILITIES", "compute")
		}, "want compute,utility"},
		{"all capabilities", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			setEnv(c, "NVIDIA_DRIVER_CAPABILITIES", "all")
		}, ""},
		{"the old 256Mi limit", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("256Mi")
		}, "memory limit of 256Mi"},
		{"no memory limit", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			delete(c.Resources.Limits, corev1.ResourceMemory)
		}, "memory limit of 0"},
		{"request over the limit", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("1Gi")
		}, "memory request of 1Gi over the limit 512Mi"},
		{"probe as --collector.probe=true", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Args = replaceArg(c.Args, "--collector.probe", "--collector.probe=true")
			c.Resources.Limits[corev1.ResourceMemory] = resource.MustParse("256Mi")
		}, "memory limit of 256Mi"},
		{"probe turned off again with compute left", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Args = append(c.Args, "--no-collector.probe")
		}, `no probe, NVIDIA_DRIVER_CAPABILITIES="compute,utility"`},
		{"probe without the JIT cache path", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "CUDA_CACHE_PATH" })
		}, `CUDA_CACHE_PATH=""`},
		{"probe without the JIT cache mount", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == jitCacheVolume })
		}, "without a jit-cache mount"},
		{"JIT cache mounted read-only", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			for i := range c.VolumeMounts {
				c.VolumeMounts[i].ReadOnly = true
			}
		}, "want /var/cache/gpulens-jit writable"},
		{"no NODE_NAME", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
		}, "NODE_NAME"},
		{"compat without the container port", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Ports = c.Ports[:1]
		}, "container port dcgm-compat 0 (false)"},
		{"compat on another port", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Args = replaceArg(c.Args, "--compat.dcgm.listen-address=:9400", "--compat.dcgm.listen-address=:9401")
		}, `--compat.dcgm.listen-address=":9401"`},
		{"compat without the Service port", func(_ *corev1.Container, svc *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			svc.Spec.Ports = svc.Spec.Ports[:1]
		}, "no Service port dcgm-compat"},
		{"compat without the endpoint", func(_ *corev1.Container, _ *corev1.Service, sm *monitoringv1.ServiceMonitor) {
			sm.Spec.Endpoints = sm.Spec.Endpoints[:1]
		}, "no ServiceMonitor endpoint on port dcgm-compat"},
		{"compat endpoint in the exporter's job", func(_ *corev1.Container, _ *corev1.Service, sm *monitoringv1.ServiceMonitor) {
			sm.Spec.Endpoints[1].RelabelConfigs = sm.Spec.Endpoints[1].RelabelConfigs[:1]
		}, `the endpoint's job is ""`},
		{"compat off, port left", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--compat.dcgm") })
		}, "DCGM view off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := exporterOf(t, good).DeepCopy()
			svc, sm := good.services[0].DeepCopy(), good.serviceMonitors[0].DeepCopy()
			tc.mutate(c, svc, sm)
			var problems []string
			problems = append(problems, exporterEnvProblems(*c)...)
			problems = append(problems, probeProblems(*c)...)
			problems = append(problems, jitCacheProblems(good.daemonSets[0].Spec.Template.Spec, *c)...)
			problems = append(problems, dcgmCompatProblems(*c, svc, sm)...)
			got := strings.Join(problems, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("problems:\n%s\nwant one containing %q", got, tc.want)
			}
		})
	}
}

func setEnv(c *corev1.Container, name, value string) {
	for i := range c.Env {
		if c.Env[i].Name == name {
			c.Env[i].Value = value
			return
		}
	}
	c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: value})
}

func replaceArg(args []string, old, new string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == old {
			out[i] = new
		}
	}
	return out
}

// withProbe is what the probe switch changes, applied to the exporter pod
// of a deployment without it.
func withProbe(spec *corev1.PodSpec) {
	c := &spec.Containers[0]
	c.Args = append(c.Args, "--collector.probe", "--collector.probe.interval=5m")
	setEnv(c, "NVIDIA_DRIVER_CAPABILITIES", "compute,utility")
	setEnv(c, "CUDA_CACHE_PATH", jitCachePath)
	setEnv(c, "CUDA_CACHE_MAXSIZE", jitCacheMaxSize)
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: jitCacheVolume, MountPath: jitCachePath})
	limit := resource.NewQuantity(jitCacheLimit, resource.BinarySI)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: jitCacheVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: limit}}})
	c.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(probeMemoryRequest, resource.BinarySI)
	c.Resources.Limits[corev1.ResourceMemory] = *resource.NewQuantity(probeMemoryLimit, resource.BinarySI)
}

// withDCGMCompat is what the DCGM view's switch changes, applied to a
// deployment without it.
func withDCGMCompat(ds *appsv1.DaemonSet, svc *corev1.Service, sm *monitoringv1.ServiceMonitor) {
	c := &ds.Spec.Template.Spec.Containers[0]
	c.Args = append(c.Args, "--compat.dcgm", fmt.Sprintf("--compat.dcgm.listen-address=:%d", dcgmPort))
	c.Ports = append(c.Ports, corev1.ContainerPort{Name: "dcgm-compat", ContainerPort: dcgmPort, Protocol: corev1.ProtocolTCP})
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "dcgm-compat", Port: dcgmPort, TargetPort: intstr.FromString("dcgm-compat"), Protocol: corev1.ProtocolTCP})
	// The native endpoint's settings, but dcgm-exporter's labels: the
	// target's namespace, pod and container are kept (exported_* for the
	// series' own, as dcgm-exporter's chart has it), and a job of its own.
	ep := *sm.Spec.Endpoints[0].DeepCopy()
	ep.Port = "dcgm-compat"
	ep.RelabelConfigs = slices.DeleteFunc(ep.RelabelConfigs, func(r monitoringv1.RelabelConfig) bool { return r.Action == "labeldrop" })
	job := dcgmJob
	ep.RelabelConfigs = append(ep.RelabelConfigs, monitoringv1.RelabelConfig{TargetLabel: "job", Replacement: &job})
	sm.Spec.Endpoints = append(sm.Spec.Endpoints, ep)
}

// compareSwitched asserts that on is off with the switches applied: the
// switches change their own fields and nothing else.
func compareSwitched(t *testing.T, where string, off, on *objects, probe, compat bool) {
	t.Helper()
	if len(off.daemonSets) != 1 || len(off.services) != 1 || len(off.serviceMonitors) != 1 {
		t.Fatalf("%s: want one DaemonSet, Service and ServiceMonitor", where)
	}
	want := &objects{
		daemonSets:      []*appsv1.DaemonSet{off.daemonSets[0].DeepCopy()},
		services:        []*corev1.Service{off.services[0].DeepCopy()},
		serviceMonitors: []*monitoringv1.ServiceMonitor{off.serviceMonitors[0].DeepCopy()},
	}
	if probe {
		withProbe(&want.daemonSets[0].Spec.Template.Spec)
	}
	if compat {
		withDCGMCompat(want.daemonSets[0], want.services[0], want.serviceMonitors[0])
	}
	// Kustomize's strategic merge moves a patched env entry first; the
	// order of env entries without $(VAR) references does not matter.
	for _, o := range []*objects{want, on} {
		for _, ds := range o.daemonSets {
			for i := range ds.Spec.Template.Spec.Containers {
				slices.SortFunc(ds.Spec.Template.Spec.Containers[i].Env, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
				slices.SortFunc(ds.Spec.Template.Spec.Containers[i].VolumeMounts, func(a, b corev1.VolumeMount) int { return strings.Compare(a.Name, b.Name) })
			}
			slices.SortFunc(ds.Spec.Template.Spec.Volumes, func(a, b corev1.Volume) int { return strings.Compare(a.Name, b.Name) })
		}
	}
	for _, p := range []struct {
		name      string
		got, want any
	}{
		{"DaemonSet", on.daemonSets, want.daemonSets},
		{"Service", on.services, want.services},
		{"ServiceMonitor", on.serviceMonitors, want.serviceMonitors},
		{"ConfigMaps", on.configMaps, off.configMaps},
		{"PrometheusRules", on.rules, off.rules},
		{"Jobs", on.jobs, off.jobs},
		{"PodMonitors", on.podMonitors, off.podMonitors},
		{"other objects", on.other, off.other},
	} {
		if !reflect.DeepEqual(p.got, p.want) {
			t.Errorf("%s: %s differ from the deployment without the switches plus their own changes:\n%s", where, p.name, jsonDiff(p.got, p.want))
		}
	}
}

// jsonDiff shows the lines where got and want differ as indented JSON.
func jsonDiff(got, want any) string {
	g, _ := json.MarshalIndent(got, "", "  ")
	w, _ := json.MarshalIndent(want, "", "  ")
	gl, wl := strings.Split(string(g), "\n"), strings.Split(string(w), "\n")
	var out []string
	for i := 0; i < max(len(gl), len(wl)) && len(out) < 20; i++ {
		var a, b string
		if i < len(gl) {
			a = gl[i]
		}
		if i < len(wl) {
			b = wl[i]
		}
		if a != b {
			out = append(out, fmt.Sprintf("line %d: got %s, want %s", i+1, strings.TrimSpace(a), strings.TrimSpace(b)))
		}
	}
	return strings.Join(out, "\n")
}

func helmObjects(t *testing.T, set ...string) *objects {
	t.Helper()
	args := []string{"template", "gpulens", filepath.Join(root, "deploy", "kubernetes", "helm", "gpulens"), "--namespace", "monitoring"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	o := &objects{}
	for i, d := range splitDocs(pinnedTool(t, "helm", args...)) {
		if err := o.decode(fmt.Sprintf("helm template %v document %d", set, i+1), d); err != nil {
			t.Error(err)
		}
	}
	return o
}

// TestHelmSwitches: probe.enabled and compat.dcgm.enabled change their own
// fields and nothing else, with and without pod attribution.
func TestHelmSwitches(t *testing.T) {
	for _, base := range [][]string{nil, {"exporter.podResources.enabled=false", "exporter.containerLogs.enabled=false"}} {
		off := helmObjects(t, base...)
		for _, tc := range []struct {
			probe, compat bool
		}{{true, false}, {false, true}, {true, true}} {
			set := slices.Clone(base)
			if tc.probe {
				set = append(set, "probe.enabled=true")
			}
			if tc.compat {
				set = append(set, "compat.dcgm.enabled=true")
			}
			where := fmt.Sprintf("helm %v", set)
			on := helmObjects(t, set...)
			checkObjects(t, where, on, 0)
			compareSwitched(t, where, off, on, tc.probe, tc.compat)
		}
	}
}

// kustomizeBuild runs kustomize (the library kubectl apply -k uses) on an
// overlay of deploy/kubernetes/base with the named components of
// deploy/kubernetes/components, and decodes the result strictly.
func kustomizeBuild(t *testing.T, components ...string) *objects {
	t.Helper()
	// An in-memory copy of base and the components, with the overlay
	// beside them (kustomize refuses absolute paths to other roots).
	fs := filesys.MakeFsInMemory()
	for _, dir := range []string{"base", "components"} {
		src := filepath.Join(root, "deploy", "kubernetes", dir)
		err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(filepath.Join(root, "deploy", "kubernetes"), path)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return fs.WriteFile(filepath.Join("/k", rel), b)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var k strings.Builder
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../base\n")
	if len(components) > 0 {
		k.WriteString("components:\n")
		for _, c := range components {
			fmt.Fprintf(&k, "  - ../components/%s\n", c)
		}
	}
	if err := fs.WriteFile("/k/overlay/kustomization.yaml", []byte(k.String())); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/k/overlay")
	if err != nil {
		t.Fatalf("kustomize build with components %v: %v", components, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	o := &objects{}
	for i, d := range splitDocs(out) {
		if err := o.decode(fmt.Sprintf("kustomize build (components %v) document %d", components, i+1), d); err != nil {
			t.Error(err)
		}
	}
	return o
}

// TestKustomizeComponents builds the base with each component, checks the
// result as TestKustomize checks the base, and that each component changes
// its own fields only.
func TestKustomizeComponents(t *testing.T) {
	off := kustomizeBuild(t)
	checkObjects(t, "kustomize build base", off, 0)
	for _, tc := range []struct {
		components    []string
		probe, compat bool
	}{
		{[]string{"probe"}, true, false},
		{[]string{"dcgm-compat"}, false, true},
		{[]string{"probe", "dcgm-compat"}, true, true},
	} {
		where := fmt.Sprintf("kustomize build base + %v", tc.components)
		on := kustomizeBuild(t, tc.components...)
		checkObjects(t, where, on, 0)
		compareSwitched(t, where, off, on, tc.probe, tc.compat)
	}
	// Every component directory is one of the above.
	dirs, _ := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "components", "*"))
	if len(dirs) != 2 {
		t.Errorf("components %v: each needs a case here", dirs)
	}
}

// composeExporterArgs is the exporter's argument list in a compose project:
// the entrypoint after the program (when set) and the command.
func composeExporterArgs(t *testing.T, s composetypes.ServiceConfig) []string {
	t.Helper()
	var args []string
	if len(s.Entrypoint) > 0 {
		if s.Entrypoint[0] != "/usr/bin/gpulens-exporter" {
			t.Errorf("exporter entrypoint %v does not run /usr/bin/gpulens-exporter", s.Entrypoint)
		}
		args = append(args, s.Entrypoint[1:]...)
	}
	return append(args, s.Command...)
}

// composeProblems checks the exporter service of a compose project against
// its switches as probeProblems and dcgmCompatProblems check a pod.
func composeProblems(t *testing.T, s composetypes.ServiceConfig) []string {
	t.Helper()
	args := composeExporterArgs(t, s)
	var out []string
	probe := boolFlag(args, "collector.probe")
	caps := ""
	if v := s.Environment["NVIDIA_DRIVER_CAPABILITIES"]; v != nil {
		caps = *v
	}
	if len(s.Gpus) > 0 || probe {
		out = append(out, capabilityProblems(probe, caps)...)
	}
	if probe {
		if len(s.Gpus) == 0 {
			out = append(out, "--collector.probe without gpus")
		}
		if s.MemLimit < probeMemoryLimit {
			out = append(out, fmt.Sprintf("--collector.probe with mem_limit %d: want at least %d", s.MemLimit, probeMemoryLimit))
		}
		if s.MemReservation > s.MemLimit {
			out = append(out, fmt.Sprintf("mem_reservation %d over mem_limit %d", s.MemReservation, s.MemLimit))
		}
		env := func(k string) string {
			if v := s.Environment[k]; v != nil {
				return *v
			}
			return ""
		}
		if env("CUDA_CACHE_PATH") != jitCachePath || env("CUDA_CACHE_MAXSIZE") != jitCacheMaxSize {
			out = append(out, fmt.Sprintf("--collector.probe with CUDA_CACHE_PATH=%q CUDA_CACHE_MAXSIZE=%q: want %s and %s (the PTX JIT's cache)", env("CUDA_CACHE_PATH"), env("CUDA_CACHE_MAXSIZE"), jitCachePath, jitCacheMaxSize))
		}
		// read_only: the cache needs a writable tmpfs there, owned by the
		// image's user (65532, deploy/docker/exporter.Dockerfile).
		tmpfs := ""
		for _, m := range s.Tmpfs {
			if p, opts, _ := strings.Cut(m, ":"); p == jitCachePath {
				tmpfs = opts
			}
		}
		if s.ReadOnly && (!strings.Contains(tmpfs, "uid=65532") || !strings.Contains(tmpfs, "size=")) {
			out = append(out, fmt.Sprintf("--collector.probe on a read-only root file system with tmpfs %q at %s: want one owned by uid 65532, with a size", tmpfs, jitCachePath))
		}
	}
	addr, hasAddr := flagValue(args, "compat.dcgm.listen-address")
	published := false
	for _, p := range s.Ports {
		published = published || (p.Target == dcgmPort && p.HostIP == "127.0.0.1")
	}
	if boolFlag(args, "compat.dcgm") || hasAddr {
		if p, ok := listenPort(addr); !ok || p != dcgmPort || !published {
			out = append(out, fmt.Sprintf("DCGM view: --compat.dcgm.listen-address=%q, %d published on 127.0.0.1: %v", addr, dcgmPort, published))
		}
	} else if published {
		out = append(out, fmt.Sprintf("DCGM view off but port %d published", dcgmPort))
	}
	return out
}

func loadComposeFiles(t *testing.T, files ...string) *composetypes.Project {
	t.Helper()
	if len(files) == 1 {
		return loadCompose(t, files[0])
	}
	// loadCompose for several files, merged in order as docker compose -f
	// a -f b merges them.
	dir := filepath.Join(root, "deploy", "compose")
	var cfgs []composetypes.ConfigFile
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, composetypes.ConfigFile{Filename: filepath.Join(dir, f), Content: b})
	}
	return loadComposeConfig(t, dir, cfgs)
}

// TestComposeSwitches loads each stack with the override files, alone and
// together, and checks the exporter service; the other services do not
// change.
func TestComposeSwitches(t *testing.T) {
	for _, tc := range []struct {
		files         []string
		probe, compat bool
	}{
		{[]string{"compose.yaml"}, false, false},
		{[]string{"compose.gpu.yaml"}, false, false},
		{[]string{"compose.gpu.yaml", "compose.probe.yaml"}, true, false},
		{[]string{"compose.yaml", "compose.dcgm.yaml"}, false, true},
		{[]string{"compose.gpu.yaml", "compose.dcgm.yaml"}, false, true},
		{[]string{"compose.gpu.yaml", "compose.probe.yaml", "compose.dcgm.yaml"}, true, true},
		{[]string{"compose.gpu.yaml", "compose.dcgm.yaml", "compose.probe.yaml"}, true, true},
	} {
		t.Run(strings.Join(tc.files, "+"), func(t *testing.T) {
			p := loadComposeFiles(t, tc.files...)
			publishedOnLoopback(t, strings.Join(tc.files, "+"), p)
			ex := p.Services["exporter"]
			for _, problem := range composeProblems(t, ex) {
				t.Error(problem)
			}
			args := composeExporterArgs(t, ex)
			if boolFlag(args, "collector.probe") != tc.probe || boolFlag(args, "compat.dcgm") != tc.compat {
				t.Errorf("exporter args %v; want probe %v, DCGM view %v", args, tc.probe, tc.compat)
			}
			// The stack's own flags stay.
			base := loadComposeFiles(t, tc.files[0])
			for _, a := range base.Services["exporter"].Command {
				if !hasArg(args, a) {
					t.Errorf("exporter args %v lost the stack's %s", args, a)
				}
			}
			for name, s := range base.Services {
				if name != "exporter" && !reflect.DeepEqual(p.Services[name], s) {
					t.Errorf("service %s changed", name)
				}
			}
		})
	}
	// Without the JIT cache's tmpfs and environment, the check fails.
	p0 := loadComposeFiles(t, "compose.gpu.yaml", "compose.probe.yaml")
	ex := p0.Services["exporter"]
	ex.Tmpfs = nil
	delete(ex.Environment, "CUDA_CACHE_PATH")
	if got := strings.Join(composeProblems(t, ex), "\n"); !strings.Contains(got, `CUDA_CACHE_PATH=""`) || !strings.Contains(got, `tmpfs ""`) {
		t.Errorf("compose.probe.yaml without the JIT cache: problems %q; want both named", got)
	}
	// The probe needs a GPU: only compose.gpu.yaml's exporter has one.
	p := loadComposeFiles(t, "compose.yaml", "compose.probe.yaml")
	if got := strings.Join(composeProblems(t, p.Services["exporter"]), "\n"); !strings.Contains(got, "--collector.probe without gpus") {
		t.Errorf("compose.yaml + compose.probe.yaml: problems %q; want the probe refused without gpus", got)
	}
}

// unit is a systemd unit file with its drop-ins: each key's values in
// order (an empty assignment resets the list, as systemd does).
type unit map[string][]string

func parseUnit(t *testing.T, files ...string) unit {
	t.Helper()
	u := unit{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		section := ""
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			l := strings.TrimSpace(sc.Text())
			switch {
			case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
			case strings.HasPrefix(l, "["):
				section = strings.Trim(l, "[]")
			default:
				k, v, ok := strings.Cut(l, "=")
				if !ok {
					t.Fatalf("%s: line %q", f, l)
				}
				key := section + "." + strings.TrimSpace(k)
				if v = strings.TrimSpace(v); v == "" {
					delete(u, key)
				} else {
					u[key] = append(u[key], v)
				}
			}
		}
	}
	return u
}

func (u unit) last(key string) string {
	if v := u[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// execArgs is ExecStart's argument list with the unit's Environment=
// expanded ($VAR as a word of its own: split at white space, nothing when
// unset, as systemd does); EnvironmentFile= is assumed empty.
func (u unit) execArgs() []string {
	env := map[string]string{}
	for _, e := range u["Service.Environment"] {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	var args []string
	for _, w := range strings.Fields(u.last("Service.ExecStart"))[1:] {
		if name, ok := strings.CutPrefix(w, "$"); ok {
			args = append(args, strings.Fields(env[name])...)
		} else {
			args = append(args, w)
		}
	}
	return args
}

// systemdBytes parses a systemd size (K, M, G, T: powers of 1024).
func systemdBytes(s string) (int64, error) {
	mult := int64(1)
	for i, suf := range []string{"K", "M", "G", "T"} {
		if n, ok := strings.CutSuffix(s, suf); ok {
			s, mult = n, int64(1)<<(10*(i+1))
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// systemdProblems checks a unit (with its drop-ins) against its probe
// switch: with --collector.probe, /dev/nvidia-uvm read-write (the last
// DeviceAllow= for it, which wins) and MemoryMax at least
// probeMemoryLimit; without, /dev/nvidia-uvm read-only.
func systemdProblems(u unit) []string {
	probe := boolFlag(u.execArgs(), "collector.probe")
	uvm := ""
	for _, d := range u["Service.DeviceAllow"] {
		if f := strings.Fields(d); len(f) == 2 && f[0] == "/dev/nvidia-uvm" {
			uvm = f[1]
		}
	}
	var out []string
	mem, err := systemdBytes(u.last("Service.MemoryMax"))
	switch {
	case probe && uvm != "rw":
		out = append(out, fmt.Sprintf("--collector.probe with DeviceAllow=/dev/nvidia-uvm %q; want rw", uvm))
	case !probe && uvm != "r":
		out = append(out, fmt.Sprintf("no probe, DeviceAllow=/dev/nvidia-uvm %q; want r", uvm))
	}
	if probe && (err != nil || mem < probeMemoryLimit) {
		out = append(out, fmt.Sprintf("--collector.probe with MemoryMax=%s: want at least %d", u.last("Service.MemoryMax"), probeMemoryLimit))
	}
	if probe {
		// The PTX JIT's cache: ProtectSystem=strict and ProtectHome=yes
		// leave no writable ~/.nv; the CacheDirectory= is writable.
		env := map[string]string{}
		for _, e := range u["Service.Environment"] {
			k, v, _ := strings.Cut(e, "=")
			env[k] = v
		}
		if u.last("Service.CacheDirectory") != "gpulens-exporter" || env["CUDA_CACHE_PATH"] != "%C/gpulens-exporter" || env["CUDA_CACHE_MAXSIZE"] != jitCacheMaxSize {
			out = append(out, fmt.Sprintf("--collector.probe with CacheDirectory=%q CUDA_CACHE_PATH=%q CUDA_CACHE_MAXSIZE=%q: want gpulens-exporter, %%C/gpulens-exporter and %s",
				u.last("Service.CacheDirectory"), env["CUDA_CACHE_PATH"], env["CUDA_CACHE_MAXSIZE"], jitCacheMaxSize))
		}
	}
	// W^X holds with the probe too (docs/verify.md: the driver and its JIT
	// need no writable-and-executable memory on the host).
	if u.last("Service.MemoryDenyWriteExecute") != "yes" {
		out = append(out, fmt.Sprintf("MemoryDenyWriteExecute=%q: want yes", u.last("Service.MemoryDenyWriteExecute")))
	}
	return out
}

// TestSystemdProbeDropIn checks both units without and with probe.conf,
// and that the checks fail for a drop-in that forgets a part.
func TestSystemdProbeDropIn(t *testing.T) {
	dir := filepath.Join(root, "deploy", "systemd")
	dropIn := filepath.Join(dir, "probe.conf")
	for _, name := range []string{"gpulens-exporter.service", "gpulens-exporter-activated.service"} {
		svc := filepath.Join(dir, name)
		off, on := parseUnit(t, svc), parseUnit(t, svc, dropIn)
		if boolFlag(off.execArgs(), "collector.probe") || !boolFlag(on.execArgs(), "collector.probe") {
			t.Errorf("%s: args %v without the drop-in, %v with it; want the probe with it only", name, off.execArgs(), on.execArgs())
		}
		for _, u := range []unit{off, on} {
			for _, p := range systemdProblems(u) {
				t.Errorf("%s: %s", name, p)
			}
		}
		// Every other setting stays.
		for k, v := range off {
			if k != "Service.DeviceAllow" && k != "Service.MemoryMax" && !reflect.DeepEqual(on[k], v) {
				t.Errorf("%s: the drop-in changes %s from %v to %v", name, k, v, on[k])
			}
		}
		for _, tc := range []struct {
			drop string
			want string
		}{
			{"DeviceAllow=/dev/nvidia-uvm rw", `DeviceAllow=/dev/nvidia-uvm "r"; want rw`},
			{"MemoryMax=512M", "MemoryMax=256M"},
			{"CacheDirectory=gpulens-exporter", `CacheDirectory=""`},
			{"Environment=CUDA_CACHE_PATH=%C/gpulens-exporter", `CUDA_CACHE_PATH=""`},
		} {
			b, err := os.ReadFile(dropIn)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(tc.drop+"\n")) {
				t.Fatalf("probe.conf has no line %q", tc.drop)
			}
			broken := filepath.Join(t.TempDir(), "probe.conf")
			if err := os.WriteFile(broken, bytes.Replace(b, []byte(tc.drop+"\n"), nil, 1), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(systemdProblems(parseUnit(t, svc, broken)), "\n"); !strings.Contains(got, tc.want) {
				t.Errorf("%s with probe.conf less %q: problems %q; want %q", name, tc.drop, got, tc.want)
			}
		}
	}
}

// TestDropsTargetPodLabels: the check on the native endpoint's relabelings
// fails without the labeldrop, with one label missed, and with a drop that
// takes more than the three.
func TestDropsTargetPodLabels(t *testing.T) {
	good := kustomizeBuild(t).serviceMonitors[0].Spec.Endpoints[0]
	for _, tc := range []struct {
		name  string
		regex string // "" removes the labeldrop
		want  bool
	}{
		{"as built", "namespace|pod|container", true},
		{"none", "", false},
		{"namespace kept", "pod|container", false},
		{"everything", ".*", false},
		{"instance too", "namespace|pod|container|instance", false},
	} {
		ep := *good.DeepCopy()
		ep.RelabelConfigs = slices.DeleteFunc(ep.RelabelConfigs, func(r monitoringv1.RelabelConfig) bool { return r.Action == "labeldrop" })
		if tc.regex != "" {
			ep.RelabelConfigs = append(ep.RelabelConfigs, monitoringv1.RelabelConfig{Action: "labeldrop", Regex: tc.regex})
		}
		if got := dropsTargetPodLabels(ep); got != tc.want {
			t.Errorf("%s: dropsTargetPodLabels = %v, want %v", tc.name, got, tc.want)
		}
	}
}
