// Package deploy_test checks what Sluice ships for Kubernetes and
// containers: the Helm chart (helm lint, helm template decoded strictly
// into the official Kubernetes and prometheus-operator Go types, the
// rendered commands run through the real CLI), the KServe runtime
// manifests (decoded strictly into their CRD's fields), and the container
// image (built by scripts/image.sh, the binary run inside it with buildah,
// serving a prediction).
//
// Helm is built from its Go module once and cached under the user's cache
// folder; a machine where it cannot be built fails these tests.
//
// The chart and the runtime are also applied to a real control plane
// (etcd, kube-apiserver and kube-controller-manager, namespaces enforcing
// Pod Security "restricted"; cluster_test.go, apiserver_test.go), whose
// binaries scripts/install-kube.sh builds into the user cache (make deps
// runs it); a machine without them fails those tests.
package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/tier"
)

// helmModule is the Helm release the tests run, built with go install
// (scripts/setup.sh builds the same version into the same folder).
const (
	helmModule  = "helm.sh/helm/v3/cmd/helm"
	helmVersion = "v3.22.0"
)

var (
	repoRoot string // the module root
	tmpRoot  string // removed after the run

	binOnce sync.Once
	binPath string
	errBin  error

	helmOnce sync.Once
	helmPath string
	errHelm  error
)

func TestMain(m *testing.M) {
	if tier.LeftOut("deploy") {
		return
	}
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Join(filepath.Dir(file), "..", "..")
	dir, err := os.MkdirTemp("", "sluice-deploy-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpRoot = dir
	code := m.Run()
	stopCluster()
	_ = os.RemoveAll(tmpRoot)
	os.Exit(code)
}

// sluiceBinary builds cmd/sluice once per test binary.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(tmpRoot, "sluice")
		// -trimpath as scripts/image.sh builds: the two share compiled packages.
		out, err := command(context.Background(), repoRoot, nil, "go", "build", "-trimpath", "-o", binPath, "./cmd/sluice")
		if err != nil {
			errBin = fmt.Errorf("build sluice: %w\n%s", err, out)
		}
	})
	if errBin != nil {
		t.Fatal(errBin)
	}
	return binPath
}

// helmBinary returns the helm binary: $SLUICE_HELM, else the one cached
// under the user's cache folder, built there with go install the first
// time (about a minute).
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if p := os.Getenv("SLUICE_HELM"); p != "" {
			helmPath = p
			return
		}
		cache, err := os.UserCacheDir()
		if err != nil {
			errHelm = fmt.Errorf("no cache folder for helm: %w", err)
			return
		}
		dir := filepath.Join(cache, "sluice", "helm-"+helmVersion)
		helmPath = filepath.Join(dir, "helm")
		ctx := context.Background()
		// The folder is per version; a binary that runs is the one built there.
		if _, err := command(ctx, "", nil, helmPath, "version", "--short"); err == nil {
			return
		}
		start := time.Now()
		env := []string{"GOBIN=" + dir, "GOFLAGS=-mod=mod"}
		if out, err := command(ctx, "", env, "go", "install", helmModule+"@"+helmVersion); err != nil {
			errHelm = fmt.Errorf("build helm %s from its Go module (go install %s@%s): %w\n%s", helmVersion, helmModule, helmVersion, err, out)
			return
		}
		fmt.Fprintf(os.Stderr, "deploy: built helm %s into %s in %s\n", helmVersion, dir, time.Since(start).Round(time.Second))
	})
	if errHelm != nil {
		t.Fatal(errHelm)
	}
	return helmPath
}

// command runs name with args in dir (the current folder when empty), the
// environment plus env, and returns its combined output.
func command(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
