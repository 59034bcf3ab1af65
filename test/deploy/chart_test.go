package deploy_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// What a real API server refused or a real cluster needs (issue 27's
// findings), checked on the rendered chart; apiserver_test.go applies the
// same renders to a control plane.

// TestHelmTemplateHelmDefaults: `helm template` of the chart with no flag
// at all (helm built with go install assumes Kubernetes v1.20).
func TestHelmTemplateHelmDefaults(t *testing.T) {
	helm := helmBinary(t)
	out, err := command(t.Context(), "", nil, helm, "template", filepath.Join(repoRoot, chartDir))
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", chartDir, err, out)
	}
}

// volumeSources lists the volume sources a volume sets.
func volumeSources(v corev1.Volume) []string {
	var set []string
	rv := reflect.ValueOf(v.VolumeSource)
	for i := range rv.NumField() {
		if !rv.Field(i).IsNil() {
			set = append(set, rv.Type().Field(i).Name)
		}
	}
	return set
}

func modelVolume(t *testing.T, ms []manifest) corev1.Volume {
	t.Helper()
	sts := find[*appsv1.StatefulSet](t, ms, "StatefulSet", "sluice-model")
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "models" {
			return v
		}
	}
	t.Fatal("no volume models")
	return corev1.Volume{}
}

// TestChartModelVolumeOneSource (finding 1): the model repository volume
// has exactly the source the values give (the API server refuses "more
// than 1 volume type"); an emptyDir when none is given; two are refused.
func TestChartModelVolumeOneSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"default", nil, "EmptyDir"},
		{"production", []string{"-f", filepath.Join(repoRoot, prodValue)}, "PersistentVolumeClaim"},
		{"docs install", []string{"--set", "modelServer.repository.volume.persistentVolumeClaim.claimName=models"}, "PersistentVolumeClaim"},
		{"nfs", []string{"--set", "modelServer.repository.volume.nfs.server=nfs.example", "--set", "modelServer.repository.volume.nfs.path=/models"}, "NFS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := volumeSources(modelVolume(t, renderWith(t, release, tc.args...)))
			if !slices.Equal(got, []string{tc.want}) {
				t.Errorf("volume models has sources %v, want exactly [%s]", got, tc.want)
			}
		})
	}
	out, err := helmTemplate(t, release, "--set", "modelServer.repository.volume.emptyDir.medium=Memory",
		"--set", "modelServer.repository.volume.persistentVolumeClaim.claimName=models")
	if err == nil || !strings.Contains(out, "give exactly one") {
		t.Errorf("two volume sources rendered (%v), want a refusal:\n%s", err, out)
	}
}

// TestChartLongReleaseName (finding 2): with a 53-character release name
// (helm's maximum) every name and label fits its limit, including those
// the controllers derive: a StatefulSet's pods carry
// controller-revision-hash=NAME-<hash of up to 10 characters>.
func TestChartLongReleaseName(t *testing.T) {
	ms := renderWith(t, longRelease, "-f", filepath.Join(repoRoot, prodValue))
	for _, m := range ms {
		meta := reflect.ValueOf(m.obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
		if errs := validation.IsDNS1123Subdomain(m.name); len(errs) > 0 {
			t.Errorf("%s %s: %v", m.kind, m.name, errs)
		}
		if m.kind == "Service" {
			if errs := validation.IsDNS1035Label(m.name); len(errs) > 0 {
				t.Errorf("Service %s: %v", m.name, errs)
			}
		}
		labelSets := []map[string]string{meta.Labels}
		switch o := m.obj.(type) {
		case *appsv1.Deployment:
			labelSets = append(labelSets, o.Spec.Template.Labels)
		case *appsv1.StatefulSet:
			labelSets = append(labelSets, o.Spec.Template.Labels, map[string]string{
				"controller-revision-hash":           o.Name + "-0123456789",
				"statefulset.kubernetes.io/pod-name": o.Name + "-99",
			})
		}
		for _, ls := range labelSets {
			for k, v := range ls {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("%s %s: label %s=%s: %v", m.kind, m.name, k, v, errs)
				}
			}
		}
	}
}

// TestChartAutoscalingMetric (finding 4): the HPA scales on one metric,
// chosen by gateway.autoscaling.metric: CPU (metrics-server) by default,
// or the in-flight requests (the Prometheus adapter); two metrics would
// block scale-down while either cannot be read.
func TestChartAutoscalingMetric(t *testing.T) {
	for _, tc := range []struct {
		metric string
		want   autoscalingv2.MetricSourceType
	}{
		{"", autoscalingv2.ResourceMetricSourceType},
		{"cpu", autoscalingv2.ResourceMetricSourceType},
		{"inFlight", autoscalingv2.PodsMetricSourceType},
	} {
		args := []string{"--set", "gateway.autoscaling.enabled=true"}
		if tc.metric != "" {
			args = append(args, "--set", "gateway.autoscaling.metric="+tc.metric)
		}
		hpa := find[*autoscalingv2.HorizontalPodAutoscaler](t, renderWith(t, release, args...), "HorizontalPodAutoscaler", "sluice-gateway")
		if len(hpa.Spec.Metrics) != 1 || hpa.Spec.Metrics[0].Type != tc.want {
			t.Errorf("metric %q: HPA metrics %+v, want one of type %s", tc.metric, hpa.Spec.Metrics, tc.want)
		}
	}
	if out, err := helmTemplate(t, release, "--set", "gateway.autoscaling.enabled=true", "--set", "gateway.autoscaling.metric=memory"); err == nil || !strings.Contains(out, "want cpu or inFlight") {
		t.Errorf("metric memory rendered (%v), want a refusal:\n%s", err, out)
	}
	// The docs name each metric's prerequisite.
	doc, err := os.ReadFile(filepath.Join(repoRoot, docsK8s))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"metrics-server", "custom.metrics.k8s.io", "metrics.k8s.io", "ScalingActive"} {
		if !strings.Contains(string(doc), w) {
			t.Errorf("%s does not mention %s", docsK8s, w)
		}
	}
}

// TestChartNetworkPolicyClosed (finding 5): with no peers configured no
// port beyond the gateway's public ones is open to other pods: no rule
// with an empty peer list (Kubernetes reads it as "everyone") and no peer
// that selects every namespace. The feature server, whose reads may be
// open, takes no ingress at all.
func TestChartNetworkPolicyClosed(t *testing.T) {
	none := filepath.Join(t.TempDir(), "no-peers.yaml")
	if err := os.WriteFile(none, []byte("networkPolicy: {clientsFrom: [], monitoringFrom: [], operatorsFrom: [], featureClientsFrom: []}\nfeatureServer: {readAuth: open}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ms := renderWith(t, release, "-f", filepath.Join(repoRoot, prodValue), "-f", none)
	for _, np := range all[*networkingv1.NetworkPolicy](ms, "NetworkPolicy") {
		for i, rule := range np.Spec.Ingress {
			public := np.Name == "sluice-gateway" && i == 0 // the public ports: clientsFrom empty means anyone, as documented
			if public {
				continue
			}
			if len(rule.From) == 0 {
				t.Errorf("NetworkPolicy %s rule %d admits every peer to %+v", np.Name, i, rule.Ports)
			}
			for _, p := range rule.From {
				if p.PodSelector == nil && p.NamespaceSelector != nil && len(p.NamespaceSelector.MatchLabels)+len(p.NamespaceSelector.MatchExpressions) == 0 {
					t.Errorf("NetworkPolicy %s rule %d admits every namespace to %+v", np.Name, i, rule.Ports)
				}
			}
		}
	}
	if np := find[*networkingv1.NetworkPolicy](t, ms, "NetworkPolicy", "sluice-features"); len(np.Spec.Ingress) != 0 {
		t.Errorf("feature server NetworkPolicy with no peers configured admits %+v", np.Spec.Ingress)
	}
}

// TestChartPodTemplates (finding 5): every container, the init container
// included, has CPU and memory requests and a memory limit; the gateway's
// readiness probe does not drop a pod on one failure; pod templates carry
// no chart version (a chart bump alone rolls no pod).
func TestChartPodTemplates(t *testing.T) {
	ms := renderWith(t, release, "-f", filepath.Join(repoRoot, prodValue),
		"--set", "modelServer.repository.initContainer.enabled=true", "--set", "modelServer.repository.initContainer.image=models:1")
	var templates []corev1.PodTemplateSpec
	for _, d := range all[*appsv1.Deployment](ms, "Deployment") {
		templates = append(templates, d.Spec.Template)
	}
	for _, s := range all[*appsv1.StatefulSet](ms, "StatefulSet") {
		templates = append(templates, s.Spec.Template)
	}
	inits := 0
	for _, tmpl := range templates {
		if _, ok := tmpl.Labels["helm.sh/chart"]; ok {
			t.Errorf("pod template %v carries helm.sh/chart", tmpl.Labels)
		}
		inits += len(tmpl.Spec.InitContainers)
		for _, c := range slices.Concat(tmpl.Spec.InitContainers, tmpl.Spec.Containers) {
			r := c.Resources
			if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() || r.Limits.Memory().IsZero() {
				t.Errorf("container %s resources %+v: want CPU and memory requests and a memory limit", c.Name, r)
			}
		}
	}
	if inits != 1 {
		t.Errorf("%d init containers rendered, want the model servers' one", inits)
	}
	g := find[*appsv1.Deployment](t, ms, "Deployment", "sluice-gateway").Spec.Template.Spec.Containers[0]
	if p := g.ReadinessProbe; p.FailureThreshold < 2 {
		t.Errorf("gateway readiness probe %+v drops a pod after one failure", p)
	}
}

// longRelease is 53 characters, the longest release name helm accepts.
var longRelease = "r" + strings.Repeat("0123456789", 5) + "ab"

const docsK8s = "docs/deploy-kubernetes.md"

// TestChartRepositoryLocation: with modelServer.repository.location the
// model server reads the bucket directly: no models volume and no init
// container, a bounded cache emptyDir, the credentials Secret as
// environment; a location together with a volume is refused.
func TestChartRepositoryLocation(t *testing.T) {
	ms := renderWith(t, release, "--set", "modelServer.repository.location=gs://bucket/models",
		"--set", "modelServer.repository.credentialsSecret=bucket-creds", "--set", "modelServer.repository.cacheSizeLimit=2Gi")
	sts := find[*appsv1.StatefulSet](t, ms, "StatefulSet", "sluice-model")
	pod := sts.Spec.Template.Spec
	if len(pod.InitContainers) != 0 {
		t.Errorf("init containers %v, want none", pod.InitContainers)
	}
	var cache *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "models" {
			t.Errorf("a models volume is rendered beside the location: %+v", v)
		}
		if v.Name == "cache" {
			cache = &pod.Volumes[i]
		}
	}
	if cache == nil || cache.EmptyDir == nil || cache.EmptyDir.SizeLimit == nil || cache.EmptyDir.SizeLimit.String() != "2Gi" {
		t.Fatalf("cache volume %+v, want an emptyDir bounded at 2Gi", cache)
	}
	c := pod.Containers[0]
	for _, want := range []string{"--model-repository=gs://bucket/models", "--repository-cache-dir=/cache", "--repository-cache-bytes=2147483648"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef == nil || c.EnvFrom[0].SecretRef.Name != "bucket-creds" {
		t.Errorf("envFrom %+v, want the Secret bucket-creds", c.EnvFrom)
	}
	for _, bad := range [][]string{
		{"--set", "modelServer.repository.location=gs://bucket/models", "--set", "modelServer.repository.volume.persistentVolumeClaim.claimName=models"},
		{"--set", "modelServer.repository.location=/models"},
	} {
		if out, err := helmTemplate(t, release, bad...); err == nil {
			t.Errorf("%v rendered, want a refusal:\n%s", bad, out)
		}
	}
}
