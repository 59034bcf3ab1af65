package deploy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// KServe's Go types are not in the Go module proxy this project uses, so
// the fields of its CRDs that the manifests may use are written here, from
// KServe's API reference (serving.kserve.io/v1alpha1 ServingRuntimeSpec,
// v1beta1 InferenceService's predictor and model spec). Pod-level fields
// are the official Kubernetes types. A field outside these fails the strict
// decode.

type servingRuntime struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              servingRuntimeSpec `json:"spec"`
}

type supportedModelFormat struct {
	Name       string  `json:"name"`
	Version    *string `json:"version,omitempty"`
	AutoSelect *bool   `json:"autoSelect,omitempty"`
	Priority   *int32  `json:"priority,omitempty"`
}

type servingRuntimeSpec struct {
	SupportedModelFormats []supportedModelFormat        `json:"supportedModelFormats,omitempty"`
	MultiModel            *bool                         `json:"multiModel,omitempty"`
	Disabled              *bool                         `json:"disabled,omitempty"`
	ProtocolVersions      []string                      `json:"protocolVersions,omitempty"`
	Containers            []corev1.Container            `json:"containers"`
	Volumes               []corev1.Volume               `json:"volumes,omitempty"`
	NodeSelector          map[string]string             `json:"nodeSelector,omitempty"`
	Affinity              *corev1.Affinity              `json:"affinity,omitempty"`
	Tolerations           []corev1.Toleration           `json:"tolerations,omitempty"`
	Labels                map[string]string             `json:"labels,omitempty"`
	Annotations           map[string]string             `json:"annotations,omitempty"`
	ImagePullSecrets      []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
}

type inferenceService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Predictor predictorSpec `json:"predictor"`
	} `json:"spec"`
}

type predictorSpec struct {
	MinReplicas        *int32     `json:"minReplicas,omitempty"`
	MaxReplicas        int32      `json:"maxReplicas,omitempty"`
	ServiceAccountName string     `json:"serviceAccountName,omitempty"`
	Model              *modelSpec `json:"model,omitempty"`
}

type modelSpec struct {
	ModelFormat struct {
		Name    string  `json:"name"`
		Version *string `json:"version,omitempty"`
	} `json:"modelFormat"`
	Runtime         *string                     `json:"runtime,omitempty"`
	ProtocolVersion *string                     `json:"protocolVersion,omitempty"`
	StorageURI      *string                     `json:"storageUri,omitempty"`
	Args            []string                    `json:"args,omitempty"`
	Env             []corev1.EnvVar             `json:"env,omitempty"`
	Resources       corev1.ResourceRequirements `json:"resources,omitzero"`
}

func kserveObject(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "serving.kserve.io/v1alpha1/ServingRuntime", "serving.kserve.io/v1alpha1/ClusterServingRuntime":
		return &servingRuntime{}, true
	case "serving.kserve.io/v1beta1/InferenceService":
		return &inferenceService{}, true
	}
	return nil, false
}

func readKServe(t *testing.T, file string) manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/kserve", file))
	if err != nil {
		t.Fatal(err)
	}
	ms := decodeStrict(t, string(b), kserveObject)
	if len(ms) != 1 {
		t.Fatalf("%s holds %d objects, want 1", file, len(ms))
	}
	return ms[0]
}

// TestKServeRuntime checks the ServingRuntime and ClusterServingRuntime:
// strict decode, the same spec in both, a command line the CLI accepts,
// the ports and probes KServe expects, the image the chart uses.
func TestKServeRuntime(t *testing.T) {
	ns := readKServe(t, "servingruntime.yaml")
	cl := readKServe(t, "clusterservingruntime.yaml")
	if ns.kind != "ServingRuntime" || cl.kind != "ClusterServingRuntime" {
		t.Fatalf("kinds %s, %s", ns.kind, cl.kind)
	}
	rt := ns.obj.(*servingRuntime)
	nsSpec, _ := yaml.Marshal(rt.Spec)
	clSpec, _ := yaml.Marshal(cl.obj.(*servingRuntime).Spec)
	if string(nsSpec) != string(clSpec) {
		t.Errorf("the ServingRuntime and the ClusterServingRuntime differ:\n%s\n---\n%s", nsSpec, clSpec)
	}
	if !slices.ContainsFunc(rt.Spec.SupportedModelFormats, func(f supportedModelFormat) bool { return f.Name == "triton" }) {
		t.Errorf("supported formats %+v lack triton (Triton-layout repositories)", rt.Spec.SupportedModelFormats)
	}
	if !slices.Contains(rt.Spec.ProtocolVersions, "v2") || !slices.Contains(rt.Spec.ProtocolVersions, "grpc-v2") {
		t.Errorf("protocol versions %v, want v2 and grpc-v2", rt.Spec.ProtocolVersions)
	}
	if len(rt.Spec.Containers) != 1 || rt.Spec.Containers[0].Name != "kserve-container" {
		t.Fatalf("containers %+v, want one named kserve-container", rt.Spec.Containers)
	}
	c := rt.Spec.Containers[0]
	if !slices.Contains(c.Args, "--model-repository=/mnt/models") {
		t.Errorf("args %v do not serve /mnt/models, where KServe puts the storageUri", c.Args)
	}
	if len(c.Ports) == 0 || c.Ports[0].ContainerPort != 8080 || !slices.Contains(c.Args, "--http-port=8080") {
		t.Errorf("first port %+v / args %v: KServe sends HTTP to the first container port; want 8080 served", c.Ports, c.Args)
	}
	out, err := command(context.Background(), "", nil, sluiceBinary(t), append(slices.Clone(c.Args), "--help")...)
	if err != nil {
		t.Errorf("sluice %s: the CLI refuses it: %v\n%s", strings.Join(c.Args, " "), err, out)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/v2/health/ready" ||
		c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/v2/health/live" {
		t.Errorf("probes %+v / %+v, want /v2/health/ready and /v2/health/live", c.ReadinessProbe, c.LivenessProbe)
	}
	if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("security context %+v: want non-root and a read-only root", c.SecurityContext)
	}
	// Pod Security "restricted" wants the runtime's default seccomp profile
	// (TestKServeRuntimePodRestricted has the API server judge it).
	if sc := c.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("security context %+v: want seccompProfile RuntimeDefault", c.SecurityContext)
	}
	// The root is read-only; the model server and the Python backend
	// write temporary files under /tmp: an emptyDir there.
	tmp := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/tmp" })
	if tmp < 0 || !slices.ContainsFunc(rt.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == c.VolumeMounts[tmp].Name && v.EmptyDir != nil
	}) {
		t.Errorf("no emptyDir mounted at /tmp: mounts %+v, volumes %+v", c.VolumeMounts, rt.Spec.Volumes)
	}
	// Every port the arguments serve is declared (grpc-v2 included).
	for _, a := range c.Args {
		for _, flag := range []string{"--http-port=", "--grpc-port="} {
			if v, ok := strings.CutPrefix(a, flag); ok && !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return fmt.Sprint(p.ContainerPort) == v }) {
				t.Errorf("%s served but not among the ports %+v", a, c.Ports)
			}
		}
	}
	// The same image and version as the chart's default.
	chart, err := os.ReadFile(filepath.Join(repoRoot, chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		t.Fatal(err)
	}
	if c.Image != "sluice:"+meta.AppVersion {
		t.Errorf("runtime image %q, want sluice:%s (the chart's appVersion)", c.Image, meta.AppVersion)
	}
}

// TestKServeInferenceService checks the example refers to the runtime and
// a format it supports.
func TestKServeInferenceService(t *testing.T) {
	isvc := readKServe(t, "inferenceservice-example.yaml").obj.(*inferenceService)
	rt := readKServe(t, "servingruntime.yaml").obj.(*servingRuntime)
	m := isvc.Spec.Predictor.Model
	if m == nil || m.Runtime == nil || *m.Runtime != rt.Name {
		t.Fatalf("predictor model %+v does not name the runtime %q", m, rt.Name)
	}
	if !slices.ContainsFunc(rt.Spec.SupportedModelFormats, func(f supportedModelFormat) bool {
		return f.Name == m.ModelFormat.Name && (m.ModelFormat.Version == nil || (f.Version != nil && *f.Version == *m.ModelFormat.Version))
	}) {
		t.Errorf("model format %+v is not among the runtime's %+v", m.ModelFormat, rt.Spec.SupportedModelFormats)
	}
	if m.ProtocolVersion == nil || !slices.Contains(rt.Spec.ProtocolVersions, *m.ProtocolVersion) {
		t.Errorf("protocol version %v not among the runtime's %v", m.ProtocolVersion, rt.Spec.ProtocolVersions)
	}
	if m.StorageURI == nil || *m.StorageURI == "" {
		t.Errorf("no storageUri")
	}
}

// TestKServeBucketRuntime: the runtime that reads a bucket itself has the
// base runtime's spec except for the repository flags and a bounded cache
// volume, and its example InferenceService names a location (no
// storageUri) that, with the runtime's arguments, the CLI accepts.
func TestKServeBucketRuntime(t *testing.T) {
	base := readKServe(t, "servingruntime.yaml").obj.(*servingRuntime)
	rt := readKServe(t, "servingruntime-bucket.yaml").obj.(*servingRuntime)
	isvc := readKServe(t, "inferenceservice-bucket.yaml").obj.(*inferenceService)
	m := isvc.Spec.Predictor.Model
	if m == nil || m.Runtime == nil || *m.Runtime != rt.Name {
		t.Fatalf("predictor model %+v does not name the runtime %q", m, rt.Name)
	}
	if m.StorageURI != nil {
		t.Errorf("storageUri %q: the runtime reads the bucket itself, KServe must not copy it", *m.StorageURI)
	}
	c := rt.Spec.Containers[0]
	if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--model-repository") }) {
		t.Errorf("runtime args %v name a repository; the InferenceService does", c.Args)
	}
	if !slices.ContainsFunc(m.Args, func(a string) bool { return strings.HasPrefix(a, "--model-repository=gs://") }) {
		t.Errorf("InferenceService args %v name no gs:// repository", m.Args)
	}
	cache := slices.IndexFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/cache" })
	if cache < 0 || !slices.Contains(c.Args, "--repository-cache-dir=/cache") || !slices.ContainsFunc(rt.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == c.VolumeMounts[cache].Name && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil
	}) {
		t.Errorf("no bounded emptyDir at /cache for the copy: mounts %+v, volumes %+v", c.VolumeMounts, rt.Spec.Volumes)
	}
	// Apart from those, the same container as the base runtime.
	strip := func(c corev1.Container) corev1.Container {
		c.Args = slices.DeleteFunc(slices.Clone(c.Args), func(a string) bool {
			return strings.HasPrefix(a, "--model-repository") || strings.HasPrefix(a, "--repository-cache")
		})
		c.VolumeMounts = slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(v corev1.VolumeMount) bool { return v.MountPath == "/cache" })
		return c
	}
	if !reflect.DeepEqual(strip(c), strip(base.Spec.Containers[0])) {
		t.Errorf("the bucket runtime's container differs from the base runtime's beyond the repository flags")
	}
	args := append(slices.Clone(c.Args), m.Args...)
	if out, err := command(context.Background(), "", nil, sluiceBinary(t), append(args, "--help")...); err != nil {
		t.Errorf("sluice %s: the CLI refuses it: %v\n%s", strings.Join(args, " "), err, out)
	}
}
