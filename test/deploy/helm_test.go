package deploy_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "deploy/helm/sluice"
	prodValue = "deploy/helm/production-values.yaml"
	release   = "sluice"
	namespace = "ml"
	// kubeVersion is the cluster version helm lint checks against (the
	// control plane the API server tests run).
	kubeVersion = "1.37.2"
)

// manifest is one rendered object: its kind and name, and the typed value
// it decoded into.
type manifest struct {
	kind, name string
	obj        any
}

// newObject returns the official Go type of apiVersion/kind; the tests
// fail on a kind the chart is not known to render.
func newObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "autoscaling/v2/HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, true
	}
	return nil, false
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeStrict splits a multi-document YAML stream and decodes each
// document into its official type, refusing unknown and duplicate fields.
func decodeStrict(t *testing.T, stream string, known func(apiVersion, kind string) (any, bool)) []manifest {
	t.Helper()
	var out []manifest
	for i, doc := range docSeparator.Split(stream, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		obj, ok := known(tm.APIVersion, tm.Kind)
		if !ok {
			t.Fatalf("document %d: unexpected %s %s\n%s", i, tm.APIVersion, tm.Kind, doc)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("document %d (%s): does not decode strictly into %T: %v\n%s", i, tm.Kind, obj, err, doc)
		}
		name := reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta).Name
		out = append(out, manifest{kind: tm.Kind, name: name, obj: obj})
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// render runs helm template on the chart with the values files, with
// helm's defaults otherwise (no --kube-version: a helm built with go
// install assumes Kubernetes v1.20, and the chart must render there too).
func render(t *testing.T, values ...string) []manifest {
	t.Helper()
	var args []string
	for _, v := range values {
		args = append(args, "-f", filepath.Join(repoRoot, v))
	}
	return renderWith(t, release, args...)
}

// renderWith runs helm template for the release with more arguments
// (-f FILE, --set K=V) and decodes the result.
func renderWith(t *testing.T, rel string, args ...string) []manifest {
	t.Helper()
	out, err := helmTemplate(t, rel, args...)
	if err != nil {
		t.Fatalf("helm template %s %s: %v\n%s", rel, strings.Join(args, " "), err, out)
	}
	return decodeStrict(t, out, newObject)
}

func helmTemplate(t *testing.T, rel string, args ...string) (string, error) {
	t.Helper()
	args = append([]string{"template", rel, filepath.Join(repoRoot, chartDir), "--namespace", namespace}, args...)
	helm := helmBinary(t) // built once, on a fresh machine for minutes: before the deadline starts
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return command(ctx, "", nil, helm, args...)
}

func find[T any](t *testing.T, ms []manifest, kind, name string) T {
	t.Helper()
	for _, m := range ms {
		if m.kind == kind && m.name == name {
			return m.obj.(T)
		}
	}
	t.Fatalf("no %s %q among %v", kind, name, names(ms)) //nolint:revive // unreachable-code: Go needs the return below all the same
	var zero T
	return zero
}

func all[T any](ms []manifest, kind string) []T {
	var out []T
	for _, m := range ms {
		if m.kind == kind {
			out = append(out, m.obj.(T))
		}
	}
	return out
}

func names(ms []manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.kind+"/"+m.name)
	}
	return out
}

// TestHelmLint runs helm lint --strict with the default and the
// production-like values.
func TestHelmLint(t *testing.T) {
	helm := helmBinary(t)
	for _, values := range [][]string{nil, {prodValue}} {
		args := []string{"lint", "--strict", filepath.Join(repoRoot, chartDir), "--namespace", namespace, "--kube-version", kubeVersion}
		for _, v := range values {
			args = append(args, "-f", filepath.Join(repoRoot, v))
		}
		out, err := command(context.Background(), "", nil, helm, args...)
		if err != nil || !strings.Contains(out, "0 chart(s) failed") || strings.Contains(out, "[WARNING]") {
			t.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestHelmTemplateDefault renders the defaults: every object decodes
// strictly, and the pieces fit together.
func TestHelmTemplateDefault(t *testing.T) {
	ms := render(t)
	want := []string{
		"ServiceAccount/sluice", "Secret/sluice-secrets", "ConfigMap/sluice-config",
		"Deployment/sluice-gateway", "Service/sluice-gateway", "Service/sluice-gateway-admin",
		"PodDisruptionBudget/sluice-gateway", "StatefulSet/sluice-model", "Service/sluice-model",
		"PodDisruptionBudget/sluice-model", "NetworkPolicy/sluice-gateway", "NetworkPolicy/sluice-model",
	}
	if got := names(ms); !sameSet(got, want) {
		t.Fatalf("rendered %v\nwant %v", got, want)
	}
	checkChart(t, ms, false)
}

// TestHelmTemplateProduction renders the production-like values:
// autoscaling, the feature server, monitoring, fleet state, locked-down
// network.
func TestHelmTemplateProduction(t *testing.T) {
	ms := render(t, prodValue)
	for _, w := range []string{
		"HorizontalPodAutoscaler/sluice-gateway", "Deployment/sluice-features", "Service/sluice-features",
		"PodDisruptionBudget/sluice-features", "ConfigMap/sluice-features-repo", "NetworkPolicy/sluice-features",
		"ServiceMonitor/sluice-gateway", "ServiceMonitor/sluice-model-server", "ServiceMonitor/sluice-feature-server",
		"PrometheusRule/sluice",
	} {
		if !slices.Contains(names(ms), w) {
			t.Errorf("no %s among %v", w, names(ms))
		}
	}
	checkChart(t, ms, true)

	hpa := find[*autoscalingv2.HorizontalPodAutoscaler](t, ms, "HorizontalPodAutoscaler", "sluice-gateway")
	if hpa.Spec.ScaleTargetRef.Kind != "Deployment" || hpa.Spec.ScaleTargetRef.Name != "sluice-gateway" {
		t.Errorf("HPA scales %+v, want the gateway Deployment", hpa.Spec.ScaleTargetRef)
	}
	if m := hpa.Spec.Metrics[0]; m.Type != autoscalingv2.PodsMetricSourceType || m.Pods.Metric.Name != "sluice_gateway_upstream_in_flight" {
		t.Errorf("HPA's first metric = %+v, want the pods metric sluice_gateway_upstream_in_flight", m)
	}
	if gw := find[*appsv1.Deployment](t, ms, "Deployment", "sluice-gateway"); gw.Spec.Replicas != nil {
		t.Errorf("with the HPA on, the Deployment sets replicas %d (the HPA owns it)", *gw.Spec.Replicas)
	}

	// The PrometheusRule carries exactly the groups deploy/prometheus generates.
	src, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/sluice-rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "files/sluice-rules.yml")); err != nil || string(cp) != string(src) {
		t.Errorf("%s/files/sluice-rules.yml differs from deploy/prometheus/sluice-rules.yml (%v): copy it", chartDir, err)
	}
	rule := find[*monitoringv1.PrometheusRule](t, ms, "PrometheusRule", "sluice")
	gen, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/sluice-prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(gen, &want); err != nil {
		t.Fatal(err)
	}
	if len(rule.Spec.Groups) == 0 || !reflect.DeepEqual(rule.Spec, want.Spec) {
		t.Errorf("the chart's PrometheusRule differs from deploy/prometheus/sluice-prometheusrule.yaml (%d groups vs %d): copy deploy/prometheus/sluice-rules.yml to %s/files/",
			len(rule.Spec.Groups), len(want.Spec.Groups), chartDir)
	}
	if rule.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v lack the operator's selector label", rule.Labels)
	}

	// ServiceMonitors: each selects a Service with the named port, scrapes
	// with the read token, and names the job the alerts expect.
	svcs := all[*corev1.Service](ms, "Service")
	for _, sm := range all[*monitoringv1.ServiceMonitor](ms, "ServiceMonitor") {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var matched []*corev1.Service
		for _, s := range svcs {
			if sel.Matches(labels.Set(s.Labels)) {
				matched = append(matched, s)
			}
		}
		if len(matched) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, len(matched))
			continue
		}
		ep := sm.Spec.Endpoints[0]
		if !slices.ContainsFunc(matched[0].Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
			t.Errorf("ServiceMonitor %s scrapes port %q; Service %s has %v", sm.Name, ep.Port, matched[0].Name, matched[0].Spec.Ports)
		}
		if ep.Authorization == nil || ep.Authorization.Credentials == nil || ep.Authorization.Credentials.Key != "read-token" {
			t.Errorf("ServiceMonitor %s does not scrape with the read token: %+v", sm.Name, ep.Authorization)
		}
		if len(ep.RelabelConfigs) == 0 || ep.RelabelConfigs[0].TargetLabel != "job" || !strings.HasPrefix(*ep.RelabelConfigs[0].Replacement, "sluice-") {
			t.Errorf("ServiceMonitor %s does not name its job sluice-*: %+v", sm.Name, ep.RelabelConfigs)
		}
	}

	// NetworkPolicy: clients reach only the gateway's public ports, from the
	// listed peers.
	np := find[*networkingv1.NetworkPolicy](t, ms, "NetworkPolicy", "sluice-gateway")
	public := np.Spec.Ingress[0]
	if len(public.From) != 1 || public.From[0].NamespaceSelector == nil {
		t.Errorf("gateway public ingress from %+v, want the ingress namespace only", public.From)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// checkChart checks what holds for every values file.
func checkChart(t *testing.T, ms []manifest, features bool) {
	t.Helper()
	sluice := sluiceBinary(t)
	cm := find[*corev1.ConfigMap](t, ms, "ConfigMap", "sluice-config")
	gw := find[*appsv1.Deployment](t, ms, "Deployment", "sluice-gateway")
	model := find[*appsv1.StatefulSet](t, ms, "StatefulSet", "sluice-model")
	workloads := map[string]corev1.PodSpec{"gateway": gw.Spec.Template.Spec, "model": model.Spec.Template.Spec}
	if features {
		workloads["features"] = find[*appsv1.Deployment](t, ms, "Deployment", "sluice-features").Spec.Template.Spec
	}

	for name, pod := range workloads {
		t.Run(name, func(t *testing.T) {
			checkPodSecurity(t, pod)
			c := pod.Containers[0]
			// The command line is one the real CLI accepts: cobra parses
			// every flag before it prints the help.
			out, err := command(context.Background(), "", nil, sluice, append(slices.Clone(c.Args), "--help")...)
			if err != nil {
				t.Errorf("sluice %s: the CLI refuses it: %v\n%s", strings.Join(c.Args, " "), err, out)
			}
			for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
				if p == nil {
					t.Fatalf("container %s lacks a startup, readiness or liveness probe", c.Name)
				}
				checkProbePort(t, c, p)
			}
			env := map[string]bool{}
			for _, e := range c.Env {
				env[e.Name] = true
			}
			if !env["SLUICE_OPERATE_TOKEN"] || !env["SLUICE_READ_TOKEN"] {
				t.Errorf("container %s lacks the token environment variables: %v", c.Name, slices.Sorted(maps.Keys(env)))
			}
		})
	}

	// Probes mean what the docs say.
	g := gw.Spec.Template.Spec.Containers[0]
	if g.ReadinessProbe.HTTPGet == nil || g.ReadinessProbe.HTTPGet.Path != "/ready" {
		t.Errorf("gateway readiness probe %+v, want GET /ready (fails while draining)", g.ReadinessProbe)
	}
	m := model.Spec.Template.Spec.Containers[0]
	if p := m.ReadinessProbe.HTTPGet; p == nil || p.Path != "/v2/health/ready" {
		t.Errorf("model server readiness probe %+v, want /v2/health/ready", m.ReadinessProbe)
	}
	if p := m.LivenessProbe.HTTPGet; p == nil || p.Path != "/v2/health/live" {
		t.Errorf("model server liveness probe %+v, want /v2/health/live (never tied to a model)", m.LivenessProbe)
	}

	// The gateway's configuration: strict Sluice config, and it agrees
	// with the pod.
	cfgText := cm.Data["sluice.yaml"]
	var cfg struct {
		Gateway struct {
			Listen, Admin, GRPC string
			DrainPeriod         string `json:"drain_period"`
			ExitTimeout         string `json:"exit_timeout"`
			Backends            []struct {
				Name, Kind string
				Endpoints  []string
			}
		}
		Cluster *struct {
			Nats struct{ URL string } `json:"nats"`
		}
	}
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int32{}
	for _, p := range g.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for listen, name := range map[string]string{cfg.Gateway.Listen: "http", cfg.Gateway.Admin: "admin", cfg.Gateway.GRPC: "grpc"} {
		if listen != fmt.Sprintf(":%d", ports[name]) {
			t.Errorf("gateway config listens on %q, the container port %s is %d", listen, name, ports[name])
		}
	}
	// Shutdown: the grace period covers preStop, the drain and in-flight
	// requests.
	drain, err := time.ParseDuration(cfg.Gateway.DrainPeriod)
	if err != nil {
		t.Fatalf("drain_period %q: %v", cfg.Gateway.DrainPeriod, err)
	}
	preStop := g.Lifecycle.PreStop.Exec.Command
	sleep, err := strconv.Atoi(preStop[len(preStop)-1])
	if err != nil || !strings.HasSuffix(preStop[0], "sleep") {
		t.Fatalf("gateway preStop %v, want a sleep", preStop)
	}
	exit, err := time.ParseDuration(cfg.Gateway.ExitTimeout)
	if err != nil {
		t.Fatalf("exit_timeout %q: %v", cfg.Gateway.ExitTimeout, err)
	}
	grace := *gw.Spec.Template.Spec.TerminationGracePeriodSeconds
	if time.Duration(grace)*time.Second <= time.Duration(sleep)*time.Second+drain+exit {
		t.Errorf("terminationGracePeriodSeconds %d does not exceed preStop %ds + drain %s + exit timeout %s", grace, sleep, drain, exit)
	}
	// One gRPC endpoint per model-server pod, through the headless Service.
	svc := find[*corev1.Service](t, ms, "Service", model.Spec.ServiceName)
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("model Service %s is not headless", svc.Name)
	}
	var eps []string
	for _, b := range cfg.Gateway.Backends {
		if b.Name == "models" {
			eps = b.Endpoints
		}
	}
	var want []string
	for i := range int(*model.Spec.Replicas) {
		want = append(want, fmt.Sprintf("%s-%d.%s.%s.svc:%d", model.Name, i, svc.Name, namespace, containerPort(t, m, "grpc")))
	}
	if !slices.Equal(eps, want) {
		t.Errorf("gateway backend endpoints %v, want %v", eps, want)
	}
	if features != (cfg.Cluster != nil) {
		t.Errorf("cluster section present = %v, want %v", cfg.Cluster != nil, features)
	}

	// sluice config check accepts the rendered file (the endpoints point at
	// a closed local port; the feature repository is the ConfigMap's files).
	dir := t.TempDir()
	closed := map[string]string{} // each in-cluster address → its own closed local port
	local := regexp.MustCompile(`[a-z0-9.-]+\.`+namespace+`\.svc:\d+`).ReplaceAllStringFunc(cfgText, func(addr string) string {
		if _, ok := closed[addr]; !ok {
			closed[addr] = fmt.Sprintf("127.0.0.1:%d", len(closed)+1)
		}
		return closed[addr]
	})
	if features {
		repo := find[*corev1.ConfigMap](t, ms, "ConfigMap", "sluice-features-repo")
		fdir := filepath.Join(dir, "features")
		if err := os.MkdirAll(fdir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range repo.Data {
			if err := os.WriteFile(filepath.Join(fdir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		local = strings.ReplaceAll(local, "/etc/sluice/features", fdir)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(local), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"SLUICE_OPERATE_TOKEN=op", "SLUICE_READ_TOKEN=rd", "SLUICE_API_KEY_DISPATCH=k", "REDIS_PASSWORD=p"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := command(ctx, "", env, sluice, "config", "check", "-c", path); err != nil || !strings.Contains(out, ": ok") {
		t.Errorf("sluice config check on the rendered sluice.yaml: %v\n%s\n--- file:\n%s", err, out, local)
	}

	// NetworkPolicy: the model servers take inference only from the gateway
	// (and operators), never from anyone.
	np := find[*networkingv1.NetworkPolicy](t, ms, "NetworkPolicy", "sluice-model")
	inf := np.Spec.Ingress[0]
	if len(inf.From) == 0 {
		t.Fatalf("model servers' inference ports are open to every peer")
	}
	gwSel, err := metav1.LabelSelectorAsSelector(inf.From[0].PodSelector)
	if err != nil || !gwSel.Matches(labels.Set(gw.Spec.Template.Labels)) || gwSel.Matches(labels.Set(model.Spec.Template.Labels)) {
		t.Errorf("model servers' first ingress peer %+v does not select the gateway pods (only)", inf.From[0])
	}

	// Every PDB and Service selects the pods it is meant for.
	for _, pdb := range all[*policyv1.PodDisruptionBudget](ms, "PodDisruptionBudget") {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, tmpl := range []map[string]string{gw.Spec.Template.Labels, model.Spec.Template.Labels} {
			if sel.Matches(labels.Set(tmpl)) {
				n++
			}
		}
		if features && sel.Matches(labels.Set(find[*appsv1.Deployment](t, ms, "Deployment", "sluice-features").Spec.Template.Labels)) {
			n++
		}
		if n != 1 {
			t.Errorf("PDB %s selects %d workloads, want 1", pdb.Name, n)
		}
	}
}

func containerPort(t *testing.T, c corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Fatalf("container %s has no port %q", c.Name, name)
	return 0
}

func checkProbePort(t *testing.T, c corev1.Container, p *corev1.Probe) {
	t.Helper()
	var port intstr.IntOrString
	switch {
	case p.HTTPGet != nil:
		port = p.HTTPGet.Port
	case p.TCPSocket != nil:
		port = p.TCPSocket.Port
	default:
		t.Errorf("container %s: probe %+v is neither HTTP nor TCP", c.Name, p)
		return
	}
	if port.Type == intstr.String {
		containerPort(t, c, port.StrVal)
	}
}

func checkPodSecurity(t *testing.T, pod corev1.PodSpec) {
	t.Helper()
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("pod security context %+v: want runAsNonRoot and a non-zero runAsUser", pod.SecurityContext)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("pod mounts a service account token it does not need")
	}
	for _, c := range slices.Concat(pod.InitContainers, pod.Containers) {
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s security context %+v: want a read-only root, no privilege escalation, all capabilities dropped", c.Name, sc)
		}
	}
}
