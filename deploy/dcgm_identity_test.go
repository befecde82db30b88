package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The DCGM view scraped as dcgm-exporter (compat.dcgm.asDCGMExporter): a
// Service of dcgm-exporter's name whose port is named metrics and a
// ServiceMonitor of its own without a jobLabel, as dcgm-exporter's chart
// (deployment/templates/service.yaml, service-monitor.yaml of
// NVIDIA/dcgm-exporter) has them, so that the Prometheus Operator gives the
// series job, service and endpoint labels dcgm-exporter's would have.

const (
	// dcgmExporterName is dcgm-exporter's Service name (its chart's
	// fullname for a release named dcgm-exporter), hence its job.
	dcgmExporterName = "dcgm-exporter"
	// dcgmComponent marks the objects of that switch.
	dcgmComponent = "dcgm-compat"
)

// splitDCGMIdentity returns o without the Service and ServiceMonitor of
// the switch, and those (nil when off).
func splitDCGMIdentity(t *testing.T, where string, o *objects) (*objects, *corev1.Service, *monitoringv1.ServiceMonitor) {
	t.Helper()
	rest := *o
	rest.services, rest.serviceMonitors = nil, nil
	var svc *corev1.Service
	var sm *monitoringv1.ServiceMonitor
	for _, s := range o.services {
		if s.Labels["app.kubernetes.io/component"] != dcgmComponent {
			rest.services = append(rest.services, s)
			continue
		}
		if svc != nil {
			t.Errorf("%s: two Services for the DCGM view: %s, %s", where, svc.Name, s.Name)
		}
		svc = s
	}
	for _, m := range o.serviceMonitors {
		if m.Labels["app.kubernetes.io/name"] != dcgmExporterName && (svc == nil || m.Name != svc.Name) {
			rest.serviceMonitors = append(rest.serviceMonitors, m)
			continue
		}
		if sm != nil {
			t.Errorf("%s: two ServiceMonitors for the DCGM view: %s, %s", where, sm.Name, m.Name)
		}
		sm = m
	}
	return &rest, svc, sm
}

// dcgmIdentityProblems checks the switch: the exporter listens on dcgmPort
// with a container port dcgm-compat; the exporter's own Service and
// ServiceMonitor have no DCGM port or endpoint (one target per node under
// each job); the Service dcgm-exporter selects the exporter pods and maps
// its port metrics to dcgm-compat; its ServiceMonitor selects it, has no
// jobLabel (job = the Service's name), one endpoint on port metrics at
// /metrics, honorLabels false and no relabelling of job, namespace, pod or
// container, as dcgm-exporter's chart.
func dcgmIdentityProblems(c corev1.Container, podLabels map[string]string, svc *corev1.Service, sm *monitoringv1.ServiceMonitor, dsvc *corev1.Service, dsm *monitoringv1.ServiceMonitor) []string {
	var out []string
	addr, _ := flagValue(c.Args, "compat.dcgm.listen-address")
	if p, ok := listenPort(addr); !ok || p != dcgmPort {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: --compat.dcgm.listen-address=%q; want :%d", addr, dcgmPort))
	}
	if p, ok := portNamed(c, "dcgm-compat"); !ok || p != dcgmPort {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: container port dcgm-compat %d (%v); want %d", p, ok, dcgmPort))
	}
	for _, p := range svc.Spec.Ports {
		if p.Name == "dcgm-compat" {
			out = append(out, "DCGM view as dcgm-exporter: the exporter's Service also has port dcgm-compat (two targets per node)")
		}
	}
	for _, ep := range sm.Spec.Endpoints {
		if ep.Port == "dcgm-compat" {
			out = append(out, "DCGM view as dcgm-exporter: the exporter's ServiceMonitor also scrapes dcgm-compat")
		}
	}
	if dsvc.Name != dcgmExporterName {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: Service %q; want %q (job and service labels)", dsvc.Name, dcgmExporterName))
	}
	if !subset(dsvc.Spec.Selector, podLabels) || len(dsvc.Spec.Selector) == 0 {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: Service selector %v does not match the exporter pods %v", dsvc.Spec.Selector, podLabels))
	}
	want := []corev1.ServicePort{{Name: "metrics", Port: dcgmPort, TargetPort: intstr.FromString("dcgm-compat"), Protocol: corev1.ProtocolTCP}}
	if !reflect.DeepEqual(dsvc.Spec.Ports, want) {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: Service ports %+v; want %+v (endpoint=\"metrics\")", dsvc.Spec.Ports, want))
	}
	if dsm == nil {
		return append(out, "DCGM view as dcgm-exporter: no ServiceMonitor")
	}
	if dsm.Namespace != dsvc.Namespace || !subset(dsm.Spec.Selector.MatchLabels, dsvc.Labels) || len(dsm.Spec.Selector.MatchLabels) == 0 {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: ServiceMonitor %s/%s selector %v does not select Service %s/%s %v", dsm.Namespace, dsm.Name, dsm.Spec.Selector.MatchLabels, dsvc.Namespace, dsvc.Name, dsvc.Labels))
	}
	// The selector must not select the exporter's own Service too.
	if subset(dsm.Spec.Selector.MatchLabels, svc.Labels) {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: ServiceMonitor selector %v also selects the exporter's Service", dsm.Spec.Selector.MatchLabels))
	}
	if dsm.Spec.JobLabel != "" {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: ServiceMonitor jobLabel %q; want none (job = the Service's name)", dsm.Spec.JobLabel))
	}
	if len(dsm.Spec.Endpoints) != 1 {
		return append(out, fmt.Sprintf("DCGM view as dcgm-exporter: %d ServiceMonitor endpoints; want 1", len(dsm.Spec.Endpoints)))
	}
	ep := dsm.Spec.Endpoints[0]
	if ep.Port != "metrics" || ep.Path != "/metrics" {
		out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: endpoint port %q path %q; want metrics /metrics", ep.Port, ep.Path))
	}
	for _, r := range append(ep.RelabelConfigs, ep.MetricRelabelConfigs...) {
		switch r.TargetLabel {
		case "job", "namespace", "pod", "container", "service", "endpoint", "instance":
			out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: endpoint relabels %s; dcgm-exporter's chart does not", r.TargetLabel))
		}
		if r.Action == "labeldrop" {
			out = append(out, fmt.Sprintf("DCGM view as dcgm-exporter: endpoint drops labels %q; dcgm-exporter's chart does not", r.Regex))
		}
	}
	return out
}

// TestHelmDCGMExporterIdentity: compat.dcgm.asDCGMExporter.enabled adds
// dcgm-exporter's Service and ServiceMonitor and moves the DCGM endpoint
// there; nothing else changes from the view's switch alone; honorLabels and
// the name are the values'.
func TestHelmDCGMExporterIdentity(t *testing.T) {
	off := helmObjects(t)
	compat := helmObjects(t, "compat.dcgm.enabled=true")
	on := helmObjects(t, "compat.dcgm.enabled=true", "compat.dcgm.asDCGMExporter.enabled=true")
	where := "helm compat.dcgm.asDCGMExporter.enabled=true"
	checkObjects(t, where, on, 0)
	rest, dsvc, dsm := splitDCGMIdentity(t, where, on)
	if dsvc == nil || dsm == nil {
		t.Fatalf("%s: no dcgm-exporter Service (%v) or ServiceMonitor (%v)", where, dsvc != nil, dsm != nil)
	}
	if dsm.Spec.Endpoints[0].HonorLabels {
		t.Errorf("%s: honorLabels true by default; dcgm-exporter's chart has false", where)
	}
	for _, p := range []struct {
		name      string
		got, want any
	}{
		{"DaemonSet", rest.daemonSets, compat.daemonSets},
		{"Service", rest.services, off.services},
		{"ServiceMonitor", rest.serviceMonitors, off.serviceMonitors},
		{"ConfigMaps", rest.configMaps, off.configMaps},
		{"PrometheusRules", rest.rules, off.rules},
	} {
		if !reflect.DeepEqual(p.got, p.want) {
			t.Errorf("%s: %s differ:\n%s", where, p.name, jsonDiff(p.got, p.want))
		}
	}

	// The GPU Operator's name and honorLabels true.
	gpuOp := helmObjects(t, "compat.dcgm.enabled=true", "compat.dcgm.asDCGMExporter.enabled=true",
		"compat.dcgm.asDCGMExporter.name=nvidia-dcgm-exporter", "compat.dcgm.serviceMonitor.honorLabels=true")
	_, dsvc, dsm = splitDCGMIdentity(t, where, gpuOp)
	if dsvc == nil || dsvc.Name != "nvidia-dcgm-exporter" || dsm == nil || dsm.Name != "nvidia-dcgm-exporter" || !dsm.Spec.Endpoints[0].HonorLabels {
		t.Errorf("name nvidia-dcgm-exporter, honorLabels true: Service %v, ServiceMonitor %+v", dsvc, dsm)
	}
	// Without the view, the switch adds nothing.
	alone := helmObjects(t, "compat.dcgm.asDCGMExporter.enabled=true")
	if !reflect.DeepEqual(alone, off) {
		t.Errorf("asDCGMExporter without compat.dcgm.enabled changes the objects")
	}
}

// TestDCGMIdentityChecksFail: the checks above reject what breaks the
// switch's promise.
func TestDCGMIdentityChecksFail(t *testing.T) {
	on := helmObjects(t, "compat.dcgm.enabled=true", "compat.dcgm.asDCGMExporter.enabled=true")
	for _, tc := range []struct {
		name   string
		change func(c *corev1.Container, svc *corev1.Service, sm *monitoringv1.ServiceMonitor, dsvc *corev1.Service, dsm *monitoringv1.ServiceMonitor)
	}{
		{"service name", func(_ *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor, dsvc *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			dsvc.Name = "gpulens-dcgm"
		}},
		{"port name", func(_ *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor, dsvc *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			dsvc.Spec.Ports[0].Name = "dcgm-compat"
		}},
		{"jobLabel", func(_ *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor, _ *corev1.Service, dsm *monitoringv1.ServiceMonitor) {
			dsm.Spec.JobLabel = "app.kubernetes.io/name"
		}},
		{"job relabelled", func(_ *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor, _ *corev1.Service, dsm *monitoringv1.ServiceMonitor) {
			job := "gpulens-dcgm"
			dsm.Spec.Endpoints[0].RelabelConfigs = append(dsm.Spec.Endpoints[0].RelabelConfigs, monitoringv1.RelabelConfig{TargetLabel: "job", Replacement: &job})
		}},
		{"pod labels dropped", func(_ *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor, _ *corev1.Service, dsm *monitoringv1.ServiceMonitor) {
			dsm.Spec.Endpoints[0].RelabelConfigs = append(dsm.Spec.Endpoints[0].RelabelConfigs, monitoringv1.RelabelConfig{Action: "labeldrop", Regex: "namespace|pod|container"})
		}},
		{"also on the exporter's Service", func(_ *corev1.Container, svc *corev1.Service, _ *monitoringv1.ServiceMonitor, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "dcgm-compat", Port: dcgmPort})
		}},
		{"selects the exporter's Service", func(_ *corev1.Container, svc *corev1.Service, _ *monitoringv1.ServiceMonitor, _ *corev1.Service, dsm *monitoringv1.ServiceMonitor) {
			dsm.Spec.Selector.MatchLabels = map[string]string{"app.kubernetes.io/part-of": "gpulens"}
		}},
		{"listens elsewhere", func(c *corev1.Container, _ *corev1.Service, _ *monitoringv1.ServiceMonitor, _ *corev1.Service, _ *monitoringv1.ServiceMonitor) {
			c.Args = replaceArg(c.Args, "--compat.dcgm.listen-address=:9400", "--compat.dcgm.listen-address=:9401")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &objects{daemonSets: []*appsv1.DaemonSet{on.daemonSets[0].DeepCopy()}}
			for _, s := range on.services {
				o.services = append(o.services, s.DeepCopy())
			}
			for _, m := range on.serviceMonitors {
				o.serviceMonitors = append(o.serviceMonitors, m.DeepCopy())
			}
			rest, dsvc, dsm := splitDCGMIdentity(t, tc.name, o)
			pod := o.daemonSets[0].Spec.Template
			c := &pod.Spec.Containers[0]
			if p := dcgmIdentityProblems(*c, pod.Labels, rest.services[0], rest.serviceMonitors[0], dsvc, dsm); len(p) != 0 {
				t.Fatalf("the unchanged objects fail: %v", p)
			}
			tc.change(c, rest.services[0], rest.serviceMonitors[0], dsvc, dsm)
			if p := dcgmIdentityProblems(*c, pod.Labels, rest.services[0], rest.serviceMonitors[0], dsvc, dsm); len(p) == 0 {
				t.Errorf("%s: no problem found", tc.name)
			} else {
				t.Logf("%s: %v", tc.name, p)
			}
		})
	}
}

// TestHelmDCGMCounters: compat.dcgm.counters becomes a ConfigMap mounted
// read-only and --compat.dcgm.counters-file naming it; the file there is the
// one given (the consumer suite's, which the exporter loads in
// alerts/dcgm_consumers_e2e_test.go).
func TestHelmDCGMCounters(t *testing.T) {
	file := filepath.Join(root, "alerts", "testdata", "dcgm-consumers", "counters.csv")
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "gpulens", filepath.Join(root, "deploy", "kubernetes", "helm", "gpulens"), "--namespace", "monitoring",
		"--set", "compat.dcgm.enabled=true", "--set-file", "compat.dcgm.counters=" + file}
	o := &objects{}
	for i, d := range splitDocs(pinnedTool(t, "helm", args...)) {
		if err := o.decode(fmt.Sprintf("helm template document %d", i+1), d); err != nil {
			t.Error(err)
		}
	}
	where := "helm compat.dcgm.counters"
	checkObjects(t, where, o, 0)
	var cm *corev1.ConfigMap
	for _, c := range o.configMaps {
		if c.Labels["app.kubernetes.io/component"] == dcgmComponent {
			cm = c
		}
	}
	if cm == nil {
		t.Fatalf("%s: no counters ConfigMap", where)
	}
	if got := cm.Data["counters.csv"]; strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Errorf("%s: counters.csv in the ConfigMap differs from the file:\n%s", where, got)
	}
	spec := o.daemonSets[0].Spec.Template.Spec
	c := spec.Containers[0]
	path, ok := flagValue(c.Args, "compat.dcgm.counters-file")
	if !ok {
		t.Fatalf("%s: no --compat.dcgm.counters-file in %v", where, c.Args)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if filepath.Join(m.MountPath, "counters.csv") != path {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && m.ReadOnly {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("%s: %s is not ConfigMap %s mounted read-only: mounts %+v volumes %+v", where, path, cm.Name, c.VolumeMounts, spec.Volumes)
	}
}
