package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	composetypes "github.com/compose-spec/compose-go/v2/types"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	amconfig "github.com/prometheus/alertmanager/config"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kustomize "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/gpulens/gpulens/internal/testenv"
)

const (
	root          = ".."
	exporterPort  = 9842
	loadgenPort   = 9843
	exporterImage = "gpulens/gpulens-exporter"
	loadgenImage  = "gpulens/gpulens-loadgen"
)

func TestGeneratedUpToDate(t *testing.T) {
	files, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("Generate wrote %d files", len(files))
	}
	for p, want := range files {
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale or missing (%v): run `go run ./deploy/gen`", p, err)
		}
	}
	// No stale copies of removed files either.
	for _, dir := range []string{ChartRulesDir, ChartDashboardsDir} {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if _, ok := files[dir+"/"+e.Name()]; !ok {
				t.Errorf("%s/%s is not generated from alerts/ or dashboards/: remove it", dir, e.Name())
			}
		}
	}
}

// splitDocs splits a multi-document YAML file, dropping empty documents.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		empty := true
		for _, l := range strings.Split(d, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			out = append(out, []byte(d))
		}
	}
	return out
}

// objects are the decoded Kubernetes objects of one deployment.
type objects struct {
	daemonSets      []*appsv1.DaemonSet
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	jobs            []*batchv1.Job
	serviceMonitors []*monitoringv1.ServiceMonitor
	podMonitors     []*monitoringv1.PodMonitor
	rules           []*monitoringv1.PrometheusRule
	other           int
}

// decode strictly decodes one document into its typed object: unknown
// fields and wrong types fail.
func (o *objects) decode(where string, doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 DaemonSet":
		v := &appsv1.DaemonSet{}
		o.daemonSets, obj = append(o.daemonSets, v), v
	case "v1 Service":
		v := &corev1.Service{}
		o.services, obj = append(o.services, v), v
	case "v1 ConfigMap":
		v := &corev1.ConfigMap{}
		o.configMaps, obj = append(o.configMaps, v), v
	case "batch/v1 Job":
		v := &batchv1.Job{}
		o.jobs, obj = append(o.jobs, v), v
	case "monitoring.coreos.com/v1 ServiceMonitor":
		v := &monitoringv1.ServiceMonitor{}
		o.serviceMonitors, obj = append(o.serviceMonitors, v), v
	case "monitoring.coreos.com/v1 PodMonitor":
		v := &monitoringv1.PodMonitor{}
		o.podMonitors, obj = append(o.podMonitors, v), v
	case "monitoring.coreos.com/v1 PrometheusRule":
		v := &monitoringv1.PrometheusRule{}
		o.rules, obj = append(o.rules, v), v
	case "v1 Namespace":
		obj = &corev1.Namespace{}
		o.other++
	case "v1 PersistentVolumeClaim":
		obj = &corev1.PersistentVolumeClaim{}
		o.other++
	default:
		return fmt.Errorf("%s: no typed check for apiVersion %q kind %q", where, tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return fmt.Errorf("%s (%s): %w", where, tm.Kind, err)
	}
	return nil
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func hasArg(args []string, want string) bool {
	for _, a := range args {
		if a == want {
			return true
		}
	}
	return false
}

// checkContainerSecurity asserts the settings every gpulens container has.
func checkContainerSecurity(t *testing.T, where string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("%s: container %s: want a read-only root filesystem, no privilege escalation and every capability dropped; got %+v", where, c.Name, sc)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("%s: container %s has no %s request", where, c.Name, r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("%s: container %s has no %s limit", where, c.Name, r)
		}
	}
}

func checkVolumes(t *testing.T, where string, spec corev1.PodSpec) {
	t.Helper()
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range spec.Containers {
		for _, m := range c.VolumeMounts {
			if !vols[m.Name] {
				t.Errorf("%s: container %s mounts volume %q, which the pod does not have", where, c.Name, m.Name)
			}
		}
	}
}

// dropsTargetPodLabels reports whether an endpoint's relabelings drop the
// namespace, pod and container labels the Prometheus Operator gives each
// target (the exporter pod's), so that the series' own (the GPU tenant's)
// keep their names.
func dropsTargetPodLabels(ep monitoringv1.Endpoint) bool {
	dropped := map[string]bool{}
	for _, r := range ep.RelabelConfigs {
		if r.Action != "labeldrop" {
			continue
		}
		re, err := regexp.Compile("^(?:" + r.Regex + ")$")
		if err != nil {
			return false
		}
		for _, l := range []string{"namespace", "pod", "container"} {
			dropped[l] = dropped[l] || re.MatchString(l)
		}
		if re.MatchString("node") || re.MatchString("instance") || re.MatchString("job") {
			return false
		}
	}
	return dropped["namespace"] && dropped["pod"] && dropped["container"]
}

func portNamed(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// checkObjects asserts how the objects of one deployment fit together and
// with the binaries: selectors, ports, images, probes, mounts, rules and
// dashboards. loadgenWorkers is the Job's expected worker count (0: no Job).
func checkObjects(t *testing.T, where string, o *objects, loadgenWorkers int) {
	t.Helper()
	o, dcgmSvc, dcgmSM := splitDCGMIdentity(t, where, o)
	if len(o.daemonSets) != 1 || len(o.services) != 1 || len(o.serviceMonitors) != 1 {
		t.Fatalf("%s: want one DaemonSet, Service and ServiceMonitor; got %d, %d, %d", where, len(o.daemonSets), len(o.services), len(o.serviceMonitors))
	}
	ds, svc, sm := o.daemonSets[0], o.services[0], o.serviceMonitors[0]
	pod := ds.Spec.Template
	if !subset(ds.Spec.Selector.MatchLabels, pod.Labels) {
		t.Errorf("%s: DaemonSet selector %v does not match its pod labels %v", where, ds.Spec.Selector.MatchLabels, pod.Labels)
	}
	if !pod.Spec.HostPID {
		t.Errorf("%s: DaemonSet without hostPID: processes would have no names or containers", where)
	}
	if len(pod.Spec.NodeSelector) == 0 {
		t.Errorf("%s: DaemonSet has no GPU node selector", where)
	}
	tolerated := false
	for _, tol := range pod.Spec.Tolerations {
		tolerated = tolerated || (tol.Key == "nvidia.com/gpu" && tol.Operator == corev1.TolerationOpExists)
	}
	if !tolerated {
		t.Errorf("%s: DaemonSet does not tolerate the nvidia.com/gpu taint", where)
	}
	checkVolumes(t, where, pod.Spec)
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: exporter pod has %d containers", where, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	checkContainerSecurity(t, where, c)
	if !strings.HasPrefix(c.Image, exporterImage+":") {
		t.Errorf("%s: exporter image %q, want %s:TAG", where, c.Image, exporterImage)
	}
	if p, ok := portNamed(c, "metrics"); !ok || p != exporterPort {
		t.Errorf("%s: exporter port metrics = %d, %v; want %d", where, p, ok, exporterPort)
	}
	if !hasArg(c.Args, fmt.Sprintf("--web.listen-address=:%d", exporterPort)) {
		t.Errorf("%s: exporter args %v do not listen on :%d", where, c.Args, exporterPort)
	}
	for _, p := range exporterEnvProblems(c) {
		t.Errorf("%s: %s", where, p)
	}
	for _, p := range probeProblems(c) {
		t.Errorf("%s: %s", where, p)
	}
	for _, p := range jitCacheProblems(pod.Spec, c) {
		t.Errorf("%s: %s", where, p)
	}
	problems := dcgmCompatProblems(c, svc, sm)
	if dcgmSvc != nil {
		problems = dcgmIdentityProblems(c, pod.Labels, svc, sm, dcgmSvc, dcgmSM)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", where, p)
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/-/healthy" || p.HTTPGet.Port.String() != "metrics" {
			t.Errorf("%s: exporter %s probe %+v; want GET /-/healthy on port metrics", where, name, p)
		}
	}
	for _, m := range c.VolumeMounts {
		if !m.ReadOnly && m.Name != jitCacheVolume {
			t.Errorf("%s: exporter mount %s is not read-only (only the probe's JIT cache may be written)", where, m.MountPath)
		}
	}
	podResources := false
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--kubernetes.pod-resources-socket=/var/lib/kubelet/pod-resources/") {
			podResources = true
			found := false
			for _, m := range c.VolumeMounts {
				found = found || strings.HasPrefix(strings.TrimPrefix(a, "--kubernetes.pod-resources-socket="), m.MountPath+"/")
			}
			if !found {
				t.Errorf("%s: %s is not under a mounted volume", where, a)
			}
		}
	}
	sc := c.SecurityContext
	if podResources && (sc.RunAsUser == nil || *sc.RunAsUser != 0) {
		t.Errorf("%s: the pod-resources socket is root's; the exporter must run as user 0", where)
	}
	if !podResources && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot) {
		t.Errorf("%s: without the pod-resources socket the exporter must run as non-root", where)
	}

	if !subset(svc.Spec.Selector, pod.Labels) {
		t.Errorf("%s: Service selector %v does not match the exporter pods %v", where, svc.Spec.Selector, pod.Labels)
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].Port != exporterPort || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("%s: Service ports %+v; want metrics %d -> metrics first", where, svc.Spec.Ports, exporterPort)
	}
	if !subset(sm.Spec.Selector.MatchLabels, svc.Labels) {
		t.Errorf("%s: ServiceMonitor selector %v does not match the Service's labels %v", where, sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if svc.Labels[sm.Spec.JobLabel] != "gpulens-exporter" {
		t.Errorf("%s: ServiceMonitor jobLabel %q gives job %q; the alerts want gpulens-exporter", where, sm.Spec.JobLabel, svc.Labels[sm.Spec.JobLabel])
	}
	if len(sm.Spec.Endpoints) == 0 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].HonorLabels {
		t.Errorf("%s: ServiceMonitor endpoints %+v; want port metrics first, without honorLabels", where, sm.Spec.Endpoints)
	} else if !dropsTargetPodLabels(sm.Spec.Endpoints[0]) {
		t.Errorf("%s: ServiceMonitor endpoint metrics relabelings %+v do not drop the target's namespace, pod and container: the tenants' labels would become exported_*", where, sm.Spec.Endpoints[0].RelabelConfigs)
	}

	ruleFiles, _ := filepath.Glob(filepath.Join(root, "alerts", "*.rules.yml"))
	if len(o.rules) != len(ruleFiles) {
		t.Errorf("%s: %d PrometheusRules for %d rule files", where, len(o.rules), len(ruleFiles))
	}
	dashboards, _ := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	n := 0
	for _, cm := range o.configMaps {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		n++
		for k, v := range cm.Data {
			var d map[string]any
			if err := json.Unmarshal([]byte(v), &d); err != nil || d["uid"] == nil || !strings.HasSuffix(k, ".json") {
				t.Errorf("%s: dashboard ConfigMap %s key %s is not a dashboard JSON: %v", where, cm.Name, k, err)
			}
		}
	}
	if n != len(dashboards) {
		t.Errorf("%s: %d dashboard ConfigMaps (label grafana_dashboard: \"1\") for %d dashboards", where, n, len(dashboards))
	}

	if loadgenWorkers == 0 {
		if len(o.jobs) != 0 {
			t.Errorf("%s: unexpected Jobs", where)
		}
		return
	}
	if len(o.jobs) != 1 || len(o.podMonitors) != 1 {
		t.Fatalf("%s: want one Job and one PodMonitor, got %d, %d", where, len(o.jobs), len(o.podMonitors))
	}
	job, pm := o.jobs[0], o.podMonitors[0]
	js := job.Spec
	if js.CompletionMode == nil || *js.CompletionMode != batchv1.IndexedCompletion ||
		js.Completions == nil || int(*js.Completions) != loadgenWorkers || js.Parallelism == nil || int(*js.Parallelism) != loadgenWorkers {
		t.Errorf("%s: Job completionMode %v completions %v parallelism %v; want Indexed, %d, %d", where, js.CompletionMode, js.Completions, js.Parallelism, loadgenWorkers, loadgenWorkers)
	}
	lc := js.Template.Spec.Containers[0]
	checkContainerSecurity(t, where, lc)
	checkVolumes(t, where, js.Template.Spec)
	if !strings.HasPrefix(lc.Image, loadgenImage+":") {
		t.Errorf("%s: load generator image %q, want %s:TAG", where, lc.Image, loadgenImage)
	}
	if len(lc.Args) == 0 || lc.Args[0] != "run" || !hasArg(lc.Args, fmt.Sprintf("--shard=$(JOB_COMPLETION_INDEX)/%d", loadgenWorkers)) ||
		!hasArg(lc.Args, fmt.Sprintf("--web.listen-address=:%d", loadgenPort)) {
		t.Errorf("%s: load generator args %v; want run --shard=$(JOB_COMPLETION_INDEX)/%d --web.listen-address=:%d", where, lc.Args, loadgenWorkers, loadgenPort)
	}
	if p, ok := portNamed(lc, "metrics"); !ok || p != loadgenPort {
		t.Errorf("%s: load generator port metrics = %d, %v; want %d", where, p, ok, loadgenPort)
	}
	if !subset(pm.Spec.Selector.MatchLabels, js.Template.Labels) {
		t.Errorf("%s: PodMonitor selector %v does not match the Job's pods %v", where, pm.Spec.Selector.MatchLabels, js.Template.Labels)
	}
	if js.Template.Labels[pm.Spec.JobLabel] != "gpulens-loadgen" {
		t.Errorf("%s: PodMonitor jobLabel %q gives job %q; the alerts want gpulens-loadgen", where, pm.Spec.JobLabel, js.Template.Labels[pm.Spec.JobLabel])
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
		t.Errorf("%s: PodMonitor endpoints %+v; want port metrics", where, pm.Spec.PodMetricsEndpoints)
	}
	// The latency recording rules read the native histograms and fall back
	// to the classic buckets: ingest both.
	if nh := pm.Spec.NativeHistogramConfig; nh.ScrapeNativeHistograms == nil || !*nh.ScrapeNativeHistograms ||
		nh.ScrapeClassicHistograms == nil || !*nh.ScrapeClassicHistograms {
		t.Errorf("%s: PodMonitor scrapeNativeHistograms %v, scrapeClassicHistograms %v; want both true", where, nh.ScrapeNativeHistograms, nh.ScrapeClassicHistograms)
	}
}

// decodeKustomization reads dir's kustomization.yaml strictly and decodes
// every resource it lists; every YAML file of dir must be listed.
func decodeKustomization(t *testing.T, dir string, o *objects) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomize.Kustomization
	if err := yaml.UnmarshalStrict(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	listed := map[string]bool{"kustomization.yaml": true}
	for _, r := range k.Resources {
		listed[r] = true
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			t.Fatalf("%s/kustomization.yaml: resource %s: %v", dir, r, err)
		}
		for i, d := range splitDocs(b) {
			if err := o.decode(fmt.Sprintf("%s/%s document %d", dir, r, i+1), d); err != nil {
				t.Error(err)
			}
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not a resource of %s/kustomization.yaml", f, dir)
		}
	}
}

func TestKustomize(t *testing.T) {
	o := &objects{}
	decodeKustomization(t, filepath.Join(root, "deploy", "kubernetes", "base"), o)
	decodeKustomization(t, filepath.Join(root, "deploy", "kubernetes", "loadgen"), o)
	checkObjects(t, "kustomize", o, 4)
}

func TestPrometheusRuleEqualsRuleFiles(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, PrometheusRuleFile))
	if err != nil {
		t.Fatal(err)
	}
	o := &objects{}
	for i, d := range splitDocs(b) {
		if err := o.decode(fmt.Sprintf("%s document %d", PrometheusRuleFile, i+1), d); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "alerts", "*.rules.yml"))
	sort.Strings(files)
	if len(o.rules) != len(files) {
		t.Fatalf("%d PrometheusRules for %d rule files", len(o.rules), len(files))
	}
	rules := 0
	for i, f := range files {
		pr := o.rules[i]
		if pr.Name != ObjectName(filepath.Base(f)) {
			t.Errorf("PrometheusRule %d is %s; want %s for %s", i, pr.Name, ObjectName(filepath.Base(f)), f)
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var want struct {
			Groups []monitoringv1.RuleGroup `json:"groups"`
		}
		if err := yaml.UnmarshalStrict(src, &want); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !reflect.DeepEqual(pr.Spec.Groups, want.Groups) {
			t.Errorf("PrometheusRule %s differs from %s", pr.Name, f)
		}
		for _, g := range pr.Spec.Groups {
			rules += len(g.Rules)
		}
	}
	if rules < 50 {
		t.Errorf("the PrometheusRules hold %d rules; alerts/ has more", rules)
	}
}

// pinnedTool runs a pinned tool of the tools module (helm, promtool) from
// testenv and returns its standard output; -short skips the test (the tool
// may need building). Paths in args are relative to this package (root is
// the repository).
func pinnedTool(t *testing.T, name string, args ...string) []byte {
	t.Helper()
	bin := testenv.Binary(t, name) // skipped under -short
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out, stderr, err := testenv.Output(ctx, nil, bin, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", name, err, out, stderr)
	}
	return out
}

func TestHelmChart(t *testing.T) {
	chart := filepath.Join(root, "deploy", "kubernetes", "helm", "gpulens")
	pinnedTool(t, "helm", "lint", "--strict", chart)
	for _, tc := range []struct {
		name    string
		set     []string
		workers int
	}{
		{"defaults", nil, 0},
		{"loadgen", []string{"loadgen.enabled=true", "loadgen.workers=8", "loadgen.resultsClaim=results"}, 8},
		{"no pod attribution", []string{"exporter.podResources.enabled=false", "exporter.containerLogs.enabled=false", "exporter.runtimeClassName=nvidia"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "gpulens", chart, "--namespace", "monitoring"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out := pinnedTool(t, "helm", args...)
			o := &objects{}
			for i, d := range splitDocs(out) {
				if err := o.decode(fmt.Sprintf("helm template %v document %d", tc.set, i+1), d); err != nil {
					t.Error(err)
				}
			}
			checkObjects(t, "helm "+tc.name, o, tc.workers)
		})
	}
}

// publishedOnLoopback asserts that every published port of the project is
// bound to 127.0.0.1.
func publishedOnLoopback(t *testing.T, file string, p *composetypes.Project) {
	t.Helper()
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s: service %s publishes %s on %q; bind it to 127.0.0.1", file, name, port.Published, port.HostIP)
			}
		}
	}
}

func loadCompose(t *testing.T, file string) *composetypes.Project {
	t.Helper()
	dir := filepath.Join(root, "deploy", "compose")
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return loadComposeConfig(t, dir, []composetypes.ConfigFile{{Filename: filepath.Join(dir, file), Content: b}})
}

// loadComposeConfig loads compose files, merged in order as
// `docker compose -f a -f b` merges them.
func loadComposeConfig(t *testing.T, dir string, files []composetypes.ConfigFile) *composetypes.Project {
	t.Helper()
	p, err := loader.LoadWithContext(context.Background(), composetypes.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: files,
		Environment: composetypes.Mapping{},
	}, func(o *loader.Options) { o.SkipResolveEnvironment = true })
	if err != nil {
		t.Fatalf("%s: %v", files[0].Filename, err)
	}
	return p
}

func TestCompose(t *testing.T) {
	for _, tc := range []struct {
		file     string
		services []string
		gpu      bool
	}{
		{"compose.yaml", []string{"alertmanager", "exporter", "grafana", "loadgen", "prometheus", "sim"}, false},
		{"compose.gpu.yaml", []string{"alertmanager", "exporter", "grafana", "loadgen", "prometheus", "vllm"}, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			p := loadCompose(t, tc.file)
			var names []string
			for n := range p.Services {
				names = append(names, n)
			}
			sort.Strings(names)
			if !reflect.DeepEqual(names, tc.services) {
				t.Errorf("services %v; want %v", names, tc.services)
			}
			publishedOnLoopback(t, tc.file, p)
			ex, lg := p.Services["exporter"], p.Services["loadgen"]
			if !hasArg(ex.Command, fmt.Sprintf("--web.listen-address=:%d", exporterPort)) || len(ex.Ports) != 1 || ex.Ports[0].Target != exporterPort {
				t.Errorf("exporter command %v ports %+v; want it on %d", ex.Command, ex.Ports, exporterPort)
			}
			if !hasArg(lg.Command, fmt.Sprintf("--web.listen-address=:%d", loadgenPort)) || len(lg.Ports) != 1 || lg.Ports[0].Target != loadgenPort {
				t.Errorf("loadgen command %v ports %+v; want it on %d", lg.Command, lg.Ports, loadgenPort)
			}
			if !strings.HasPrefix(ex.Image, exporterImage+":") || ex.Build == nil || ex.Build.Dockerfile != "deploy/docker/exporter.Dockerfile" {
				t.Errorf("exporter image %q build %+v", ex.Image, ex.Build)
			}
			if !strings.HasPrefix(lg.Image, loadgenImage+":") || lg.Build == nil || lg.Build.Dockerfile != "deploy/docker/loadgen.Dockerfile" {
				t.Errorf("loadgen image %q build %+v", lg.Image, lg.Build)
			}
			simulated := hasArg(ex.Command, "--sim.scenario=demo")
			if tc.gpu {
				if simulated || len(ex.Gpus) == 0 || ex.Pid != "host" || len(p.Services["vllm"].Gpus) == 0 {
					t.Errorf("real-GPU stack: exporter command %v gpus %v pid %q, vllm gpus %v", ex.Command, ex.Gpus, ex.Pid, p.Services["vllm"].Gpus)
				}
			} else if !simulated || len(ex.Gpus) != 0 {
				t.Errorf("simulated stack: exporter command %v gpus %v", ex.Command, ex.Gpus)
			}
			// Grafana gets the dashboards and the provisioning.
			mounts := map[string]string{}
			for _, v := range p.Services["grafana"].Volumes {
				mounts[v.Target] = v.Source
			}
			if src := mounts["/var/lib/grafana/dashboards/gpulens"]; filepath.Clean(src) != filepath.Clean(filepath.Join(p.WorkingDir, "..", "..", "dashboards")) {
				t.Errorf("grafana dashboards mount from %q", src)
			}
		})
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	dir := filepath.Join(root, "deploy", "compose", "grafana", "provisioning")
	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string            `json:"name"`
			UID       string            `json:"uid"`
			Type      string            `json:"type"`
			Access    string            `json:"access"`
			URL       string            `json:"url"`
			IsDefault bool              `json:"isDefault"`
			Editable  bool              `json:"editable"`
			JSONData  map[string]string `json:"jsonData"`
		} `json:"datasources"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "datasources", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" || !ds.Datasources[0].IsDefault {
		t.Errorf("datasource provisioning %+v", ds)
	}
	var dp struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name                  string `json:"name"`
			Folder                string `json:"folder"`
			Type                  string `json:"type"`
			DisableDeletion       bool   `json:"disableDeletion"`
			AllowUIUpdates        bool   `json:"allowUiUpdates"`
			UpdateIntervalSeconds int    `json:"updateIntervalSeconds"`
			Options               struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	b, err = os.ReadFile(filepath.Join(dir, "dashboards", "gpulens.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &dp); err != nil {
		t.Fatal(err)
	}
	if dp.APIVersion != 1 || len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path != "/var/lib/grafana/dashboards/gpulens" {
		t.Errorf("dashboard provisioning %+v", dp)
	}
}

func TestPrometheusConfigs(t *testing.T) {
	rules, _ := filepath.Glob(filepath.Join(root, "alerts", "*.rules.yml"))
	for _, cfg := range []string{"deploy/prometheus/prometheus.yml", "deploy/compose/prometheus.yml", "deploy/compose/prometheus.gpu.yml"} {
		t.Run(cfg, func(t *testing.T) {
			// As installed: the rule files in rules/ next to the config.
			dir := t.TempDir()
			if err := os.Mkdir(filepath.Join(dir, "rules"), 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range rules {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "rules", filepath.Base(f)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(filepath.Join(root, cfg))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			out := pinnedTool(t, "promtool", "check", "config", filepath.Join(dir, "prometheus.yml"))
			if n := strings.Count(string(out), "SUCCESS: "); n < 1+len(rules) {
				t.Errorf("promtool check config checked %d files; want the config and %d rule files:\n%s", n, len(rules), out)
			}
			checkHistogramScraping(t, cfg, b)
		})
	}
}

// checkHistogramScraping asserts that a Prometheus configuration ingests
// the load generator's native histograms together with its classic buckets
// (the latency recording rules read the former and fall back to the
// latter), and leaves the other jobs on the text format: the exporter's
// cached text exposition is its cheap path, and vLLM and the simulated
// server serve classic histograms only.
func checkHistogramScraping(t *testing.T, file string, raw []byte) {
	t.Helper()
	var cfg struct {
		Global        map[string]any   `json:"global"`
		ScrapeConfigs []map[string]any `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if _, ok := cfg.Global["scrape_native_histograms"]; ok {
		t.Errorf("%s: scrape_native_histograms is global; set it on the gpulens-loadgen job only", file)
	}
	found := false
	for _, job := range cfg.ScrapeConfigs {
		native, classic := job["scrape_native_histograms"], job["always_scrape_classic_histograms"]
		if job["job_name"] == "gpulens-loadgen" {
			found = true
			if native != true || classic != true {
				t.Errorf("%s: job gpulens-loadgen has scrape_native_histograms %v, always_scrape_classic_histograms %v; want both true", file, native, classic)
			}
		} else if native == true {
			t.Errorf("%s: job %v scrapes native histograms; only gpulens-loadgen serves them", file, job["job_name"])
		}
	}
	if !found {
		t.Errorf("%s: no gpulens-loadgen job", file)
	}
}

func TestAlertmanagerConfig(t *testing.T) {
	cfg, err := amconfig.LoadFile(filepath.Join(root, "deploy", "compose", "alertmanager.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Route == nil || cfg.Route.Receiver != "none" || len(cfg.InhibitRules) != 1 {
		t.Errorf("alertmanager.yml: route %+v, %d inhibit rules", cfg.Route, len(cfg.InhibitRules))
	}
}

// binaryFlags lists the long flags `bin args... --help` documents.
func binaryFlags(t *testing.T, bin string, args ...string) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := testenv.CombinedOutput(ctx, nil, bin, append(args, "--help")...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`--(\[no-\])?([a-z][a-z0-9.-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[2]] = true
		if m[1] != "" {
			flags["no-"+m[2]] = true
		}
	}
	return flags
}

// TestFlagsExist checks every flag the manifests pass to gpulens-exporter
// and gpulens-loadgen against the flags the binaries document.
func TestFlagsExist(t *testing.T) {
	bins := testenv.Binaries(t, "gpulens-exporter", "gpulens-loadgen")
	exporter := binaryFlags(t, bins[0])
	sub := map[string]map[string]bool{}
	for _, s := range []string{"run", "sim"} {
		sub[s] = binaryFlags(t, bins[1], s)
	}
	check := func(where string, flags map[string]bool, args []string) {
		t.Helper()
		if len(args) == 0 {
			t.Errorf("%s: no arguments", where)
		}
		for _, a := range args {
			if !strings.HasPrefix(a, "--") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !flags[name] {
				t.Errorf("%s: flag --%s is not a flag of the program", where, name)
			}
		}
	}
	loadgenArgs := func(where string, args []string) {
		t.Helper()
		if len(args) == 0 || sub[args[0]] == nil {
			t.Errorf("%s: args %v do not start with run or sim", where, args)
			return
		}
		check(where, sub[args[0]], args[1:])
	}

	o := &objects{}
	decodeKustomization(t, filepath.Join(root, "deploy", "kubernetes", "base"), o)
	decodeKustomization(t, filepath.Join(root, "deploy", "kubernetes", "loadgen"), o)
	check("kustomize DaemonSet", exporter, o.daemonSets[0].Spec.Template.Spec.Containers[0].Args)
	loadgenArgs("kustomize Job", o.jobs[0].Spec.Template.Spec.Containers[0].Args)

	// The switches: the kustomize components, the Helm values, the
	// compose override files and the systemd drop-in.
	both := kustomizeBuild(t, "probe", "dcgm-compat")
	check("kustomize DaemonSet with the components", exporter, both.daemonSets[0].Spec.Template.Spec.Containers[0].Args)
	helm := helmObjects(t, "probe.enabled=true", "compat.dcgm.enabled=true")
	check("helm DaemonSet with the probe and the DCGM view", exporter, helm.daemonSets[0].Spec.Template.Spec.Containers[0].Args)
	for _, files := range [][]string{{"compose.gpu.yaml", "compose.probe.yaml", "compose.dcgm.yaml"}, {"compose.yaml", "compose.dcgm.yaml"}} {
		p := loadComposeFiles(t, files...)
		check(strings.Join(files, "+")+" exporter", exporter, composeExporterArgs(t, p.Services["exporter"]))
	}
	sd := filepath.Join(root, "deploy", "systemd")
	check("systemd unit with probe.conf", exporter, parseUnit(t, filepath.Join(sd, "gpulens-exporter.service"), filepath.Join(sd, "probe.conf")).execArgs())

	for _, file := range []string{"compose.yaml", "compose.gpu.yaml"} {
		p := loadCompose(t, file)
		check(file+" exporter", exporter, p.Services["exporter"].Command)
		loadgenArgs(file+" loadgen", p.Services["loadgen"].Command)
		if s, ok := p.Services["sim"]; ok {
			loadgenArgs(file+" sim", s.Command)
		}
	}

	units, _ := filepath.Glob(filepath.Join(root, "deploy", "systemd", "*.service"))
	if len(units) != 2 {
		t.Errorf("systemd units: %v", units)
	}
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^ExecStart=/usr/local/bin/gpulens-exporter (.*)$`).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no ExecStart of /usr/local/bin/gpulens-exporter", u)
			continue
		}
		args := strings.Fields(string(m[1]))
		check(u, exporter, args)
		socket := strings.TrimSuffix(u, ".service") + ".socket"
		if _, err := os.Stat(socket); err == nil {
			sb, _ := os.ReadFile(socket)
			if !hasArg(args, "--web.systemd-socket") || !bytes.Contains(sb, []byte(fmt.Sprintf("ListenStream=%d", exporterPort))) {
				t.Errorf("%s: socket activation needs --web.systemd-socket and %s listening on %d", u, socket, exporterPort)
			}
		} else if !hasArg(args, fmt.Sprintf("--web.listen-address=:%d", exporterPort)) {
			t.Errorf("%s: listens elsewhere than :%d: %v", u, exporterPort, args)
		}
	}
}
