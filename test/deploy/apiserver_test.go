package deploy_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// The chart and the KServe runtime on a real API server (cluster_test.go):
// every namespace enforces Pod Security "restricted".

// namespace creates ns enforcing (and warning and auditing) the
// restricted Pod Security level.
func (c *controlPlane) namespace(t *testing.T, ns string) {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  labels:
    pod-security.kubernetes.io/enforce: restricted
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/audit: restricted
`, ns)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := c.kubectl(ctx, doc, "apply", "-f", "-"); err != nil {
		t.Fatalf("create namespace %s: %v\n%s", ns, err, out)
	}
}

// helm runs the helm binary against the cluster.
func (c *controlPlane) helm(ctx context.Context, t *testing.T, args ...string) (string, error) {
	t.Helper()
	return c.run(ctx, "", helmBinary(t), args...)
}

// variant is one way of installing the chart.
type variant struct {
	name    string   // also the namespace, prefixed with t-
	release string   // default "sluice"
	args    []string // -f FILE, --set ..., relative to the repository
	setup   string   // objects applied in the namespace first
}

// TestChartOnAPIServer renders every variant (default values, production
// values, the production values under a 53-character release name, each
// values example in docs/deploy-kubernetes.md), applies it with
// --dry-run=server --validate=strict (no error, no warning), installs it
// with helm, and waits until the controller manager has created every
// pod of every Deployment and StatefulSet, with no Warning event.
func TestChartOnAPIServer(t *testing.T) {
	c := cluster(t)
	pvc, err := os.ReadFile(filepath.Join(repoRoot, "deploy/helm/models-pvc.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	variants := []variant{
		{name: "default"},
		{name: "production", args: []string{"-f", prodValue}, setup: string(pvc)},
		{name: "long-release", release: longRelease, args: []string{"-f", prodValue}, setup: string(pvc)},
	}
	for i, v := range docsValues(t) {
		f := filepath.Join(t.TempDir(), fmt.Sprintf("docs-values-%d.yaml", i+1))
		if err := os.WriteFile(f, []byte(v.body), 0o644); err != nil {
			t.Fatal(err)
		}
		variants = append(variants, variant{name: fmt.Sprintf("docs-values-%d", i+1), args: []string{"-f", f}})
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			installVariant(t, c, v)
		})
	}
}

func installVariant(t *testing.T, c *controlPlane, v variant) {
	t.Helper()
	ns := "t-" + v.name
	rel := v.release
	if rel == "" {
		rel = release
	}
	c.namespace(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if v.setup != "" {
		if out, err := c.kubectl(ctx, v.setup, "apply", "-n", ns, "-f", "-"); err != nil {
			t.Fatalf("setup: %v\n%s", err, out)
		}
	}
	args := append([]string{rel, filepath.Join(repoRoot, chartDir), "--namespace", ns}, v.args...)
	rendered, err := c.helm(ctx, t, append([]string{"template"}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, rendered)
	}
	// Every object as the API server would store it: schema, defaults,
	// admission (Pod Security included), strict field validation.
	out, err := c.kubectl(ctx, rendered, "apply", "--dry-run=server", "--validate=strict", "-n", ns, "-f", "-")
	if err != nil || strings.Contains(strings.ToLower(out), "warning") {
		t.Fatalf("kubectl apply --dry-run=server --validate=strict: %v\n%s", err, out)
	}
	out, err = c.helm(ctx, t, append([]string{"install"}, args...)...)
	if err != nil || !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install %s: %v\n%s", strings.Join(v.args, " "), err, out)
	}
	c.waitPods(t, ns)
}

// hpaMetricWarnings are the events an HPA records while the metrics API it
// needs is absent (this control plane has neither metrics-server nor the
// Prometheus adapter; docs/deploy-kubernetes.md names both as
// prerequisites). They are the documented state of such a cluster, not a
// fault of the chart.
var hpaMetricWarnings = []string{"FailedGetResourceMetric", "FailedGetPodsMetric", "FailedComputeMetricsReplicas"}

// ignoredWarning says whether a Warning event is the control plane's and
// not the chart's:
//   - an HPA's missing metrics API (hpaMetricWarnings);
//   - ClusterIPNotAllocated on a Service: the API server's ClusterIP repair
//     controller reads Services and IPAddresses from two informer caches,
//     and on a loaded machine it can see a new Service before the
//     IPAddress that the API server allocated with it ("not allocated;
//     repairing", then AlreadyExists). The chart sets no cluster IP (only
//     "None" for the headless Service), so it cannot cause a real one.
func ignoredWarning(e corev1.Event) bool {
	switch e.InvolvedObject.Kind {
	case "HorizontalPodAutoscaler":
		return slices.Contains(hpaMetricWarnings, e.Reason)
	case "Service":
		return e.Reason == "ClusterIPNotAllocated"
	}
	return false
}

// waitPods waits until every Deployment and StatefulSet in ns has all its
// pods created (an HPA's target at least its minReplicas), failing at the
// first Warning event.
func (c *controlPlane) waitPods(t *testing.T, ns string) {
	t.Helper()
	harness.WaitFor(t, 4*time.Minute, 250*time.Millisecond, "pods created in "+ns, func() (bool, string) {
		var events corev1.EventList
		if err := c.get("/api/v1/namespaces/"+ns+"/events?fieldSelector="+url.QueryEscape("type=Warning"), &events); err != nil {
			t.Fatal(err)
		}
		var warnings []string
		for _, e := range events.Items {
			if ignoredWarning(e) {
				continue
			}
			warnings = append(warnings, fmt.Sprintf("%s/%s: %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message))
		}
		if len(warnings) > 0 {
			t.Fatalf("Warning events in %s:\n  %s", ns, strings.Join(warnings, "\n  "))
		}
		missing := c.missingPods(t, ns)
		return len(missing) == 0, "missing: " + strings.Join(missing, "; ")
	})
}

// missingPods says which workloads of ns lack pods; empty when none does.
func (c *controlPlane) missingPods(t *testing.T, ns string) []string {
	t.Helper()
	var deps appsv1.DeploymentList
	var sts appsv1.StatefulSetList
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	var pods corev1.PodList
	for path, into := range map[string]any{
		"/apis/apps/v1/namespaces/" + ns + "/deployments":                     &deps,
		"/apis/apps/v1/namespaces/" + ns + "/statefulsets":                    &sts,
		"/apis/autoscaling/v2/namespaces/" + ns + "/horizontalpodautoscalers": &hpas,
		"/api/v1/namespaces/" + ns + "/pods":                                  &pods,
	} {
		if err := c.get(path, into); err != nil {
			t.Fatal(err)
		}
	}
	count := func(sel *metav1.LabelSelector) int {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && s.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		return n
	}
	var missing []string
	if len(deps.Items)+len(sts.Items) == 0 {
		return []string{"no Deployment or StatefulSet yet"}
	}
	for _, d := range deps.Items {
		want := int32(1)
		if d.Spec.Replicas != nil {
			want = *d.Spec.Replicas
		}
		for _, h := range hpas.Items {
			if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name && h.Spec.MinReplicas != nil && want < *h.Spec.MinReplicas {
				missing = append(missing, fmt.Sprintf("Deployment %s: %d replicas, below its HPA's minimum %d", d.Name, want, *h.Spec.MinReplicas))
			}
		}
		if got := count(d.Spec.Selector); got != int(want) {
			missing = append(missing, fmt.Sprintf("Deployment %s: %d of %d pods", d.Name, got, want))
		}
	}
	for _, s := range sts.Items {
		if got := count(s.Spec.Selector); got != int(*s.Spec.Replicas) {
			missing = append(missing, fmt.Sprintf("StatefulSet %s: %d of %d pods", s.Name, got, *s.Spec.Replicas))
		}
	}
	return missing
}

// TestKServeRuntimePodRestricted creates the ServingRuntime's containers
// and volumes as a Pod in a namespace enforcing "restricted", as KServe's
// controller would for a predictor: admitted, with no warning.
func TestKServeRuntimePodRestricted(t *testing.T) {
	c := cluster(t)
	ns := "t-kserve-pod"
	c.namespace(t, ns)
	rt := readKServe(t, "servingruntime.yaml").obj.(*servingRuntime)
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-runtime", Labels: rt.Spec.Labels, Annotations: rt.Spec.Annotations},
		Spec:       corev1.PodSpec{Containers: rt.Spec.Containers, Volumes: rt.Spec.Volumes},
	}
	doc, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := c.kubectl(ctx, string(doc), "create", "-n", ns, "-f", "-")
	if err != nil || strings.Contains(strings.ToLower(out), "warning") {
		t.Fatalf("the runtime's container spec as a Pod under restricted: %v\n%s\n%s", err, out, doc)
	}
}

// TestChartRefusesSingleNodeClaim: a ReadWriteOnce claim mounted by more
// than one model-server replica is refused at install, naming the modes
// that work.
func TestChartRefusesSingleNodeClaim(t *testing.T) {
	c := cluster(t)
	ns := "t-pvc-rwo"
	c.namespace(t, ns)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	claim := `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: models}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`
	if out, err := c.kubectl(ctx, claim, "apply", "-n", ns, "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	out, err := c.helm(ctx, t, "install", release, filepath.Join(repoRoot, chartDir), "-n", ns,
		"--set", "modelServer.replicas=3", "--set", "modelServer.repository.volume.persistentVolumeClaim.claimName=models")
	if err == nil || !strings.Contains(out, "ReadOnlyMany or ReadWriteMany") {
		t.Fatalf("helm install with a ReadWriteOnce claim for 3 replicas: %v, want a refusal naming ReadOnlyMany or ReadWriteMany\n%s", err, out)
	}
	// One replica may use it.
	out, err = c.helm(ctx, t, "install", release, filepath.Join(repoRoot, chartDir), "-n", ns,
		"--set", "modelServer.replicas=1", "--set", "modelServer.repository.volume.persistentVolumeClaim.claimName=models")
	if err != nil || !strings.Contains(out, "STATUS: deployed") {
		t.Fatalf("helm install with a ReadWriteOnce claim for 1 replica: %v\n%s", err, out)
	}
	c.waitPods(t, ns)
}

// TestDocsKubernetesCommands runs every command of docs/deploy-kubernetes.md
// marked as run by test/deploy, in order, with kubectl and helm on PATH and
// the test's cluster as the current context, as a user would paste them;
// then the pods of the namespace they install into must all be created,
// with no Warning event.
func TestDocsKubernetesCommands(t *testing.T) {
	c := cluster(t)
	helm := helmBinary(t)
	cmds := docsCommands(t)
	if len(cmds) < 4 {
		t.Fatalf("%s: %d commands marked for the API server test, want the install and KServe commands", docsK8s, len(cmds))
	}
	namespaces := map[string]bool{}
	nsFlag := regexp.MustCompile(`(?:-n|--namespace)[ =]([a-z0-9-]+)`)
	for _, cmd := range cmds {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		out, err := command(ctx, repoRoot, c.env(helm), "bash", "-euo", "pipefail", "-c", cmd.text)
		cancel()
		if err != nil {
			t.Fatalf("%s:%d: %s: %v\n%s", docsK8s, cmd.line, cmd.text, err, out)
		}
		for _, m := range nsFlag.FindAllStringSubmatch(cmd.text, -1) {
			namespaces[m[1]] = true
		}
	}
	for ns := range namespaces {
		var n corev1.Namespace
		if err := c.get("/api/v1/namespaces/"+ns, &n); err != nil {
			t.Fatal(err)
		}
		if n.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
			t.Errorf("the docs' namespace %s does not enforce restricted: labels %v", ns, n.Labels)
		}
		c.waitPods(t, ns)
	}
}

type docsValue struct {
	line int
	body string
}

// docsValues returns the chart values examples of docs/deploy-kubernetes.md:
// the ```yaml blocks after a <!-- chart values --> line.
func docsValues(t *testing.T) []docsValue {
	t.Helper()
	lines := docsLines(t)
	var out []docsValue
	for i := 1; i < len(lines); i++ {
		if lines[i] != "```yaml" || !strings.HasPrefix(lines[i-1], "<!-- chart values") {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && lines[i] != "```"; i++ {
		}
		out = append(out, docsValue{line: start, body: strings.Join(lines[start:i], "\n") + "\n"})
	}
	if len(out) == 0 {
		t.Fatalf("%s has no chart values examples (```yaml after <!-- chart values -->)", docsK8s)
	}
	return out
}

// k8sMark precedes the console blocks this test runs; the docs command
// test (test/docs) leaves them alone as illustrative.
const k8sMark = "test/deploy applies it to a real API server"

// docsCommands returns the "$ " commands of the console blocks after a
// line containing k8sMark, continuation lines joined.
func docsCommands(t *testing.T) []docCommand {
	t.Helper()
	lines := docsLines(t)
	var out []docCommand
	for i := 1; i < len(lines); i++ {
		if lines[i] != "```console" || !strings.Contains(lines[i-1], k8sMark) {
			continue
		}
		var cur *docCommand
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			l := lines[i]
			switch {
			case cur != nil:
				cur.text += "\n" + l
			case strings.HasPrefix(l, "$ "):
				out = append(out, docCommand{line: i + 1, text: strings.TrimPrefix(l, "$ ")})
				cur = &out[len(out)-1]
			default:
				continue // output
			}
			if !strings.HasSuffix(l, `\`) {
				cur = nil
			}
		}
	}
	return out
}

type docCommand struct {
	line int
	text string
}

func docsLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, docsK8s))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}
