package deploy_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A real Kubernetes control plane for the chart and the KServe runtime:
// etcd (Debian's etcd-server), kube-apiserver and kube-controller-manager
// (built from the Go module proxy by scripts/install-kube.sh into the user
// cache), everything on 127.0.0.1 with certificates made here. No kubelet
// and no scheduler: the controller manager creates the ReplicaSets and the
// pods objects (admission, Pod Security and name limits apply), nothing
// runs them. One control plane per test binary, shared by the tests; each
// test works in namespaces of its own.

var (
	clusterOnce sync.Once
	theCluster  *controlPlane
	errCluster  error
)

type controlPlane struct {
	dir        string // certificates, data, logs, kubeconfig
	kubeconfig string
	kubeBin    string // folder of kube-apiserver, kube-controller-manager, kubectl
	crdDir     string // prometheus-operator's CRDs
	server     string // https://127.0.0.1:PORT
	client     *http.Client
	procs      []*process
}

type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// cluster returns the shared control plane, started by the first test that
// needs it (about 10-60 s on a loaded machine). A machine without the
// binaries fails the test: scripts/setup.sh (make deps) installs them.
func cluster(t *testing.T) *controlPlane {
	t.Helper()
	clusterOnce.Do(func() {
		theCluster, errCluster = startControlPlane()
	})
	if errCluster != nil {
		t.Fatal(errCluster)
	}
	return theCluster
}

// stopCluster stops the processes by pid, the controller manager first.
func stopCluster() {
	if theCluster == nil {
		return
	}
	for _, v := range slices.Backward(theCluster.procs) {
		v.stop()
	}
}

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func startControlPlane() (*controlPlane, error) {
	start := time.Now()
	out, err := command(context.Background(), repoRoot, nil, filepath.Join(repoRoot, "scripts/install-kube.sh"), "--check")
	if err != nil {
		return nil, fmt.Errorf("the control plane's binaries (make deps builds them into the user cache with scripts/install-kube.sh): %w\n%s", err, out)
	}
	kubeDir := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
	etcd, err := exec.LookPath("etcd")
	if err != nil {
		return nil, errors.New("etcd not found: install Debian's etcd-server (scripts/setup.sh does as root)")
	}
	c := &controlPlane{
		dir:     filepath.Join(tmpRoot, "cluster"),
		kubeBin: filepath.Join(kubeDir, "bin"),
		crdDir:  filepath.Join(kubeDir, "crds"),
	}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			stopCluster()
		}
	}()
	theCluster = c // stopCluster stops what started, even on failure
	if err := c.writeCerts(); err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	etcdClient, etcdPeer, etcdMetrics, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3], ports[4]
	c.server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	f := func(name string) string { return filepath.Join(c.dir, name) }

	// etcd
	u := func(p int) string { return fmt.Sprintf("http://127.0.0.1:%d", p) }
	if err := c.start("etcd", etcd,
		"--name=sluice", "--data-dir="+f("etcd"),
		"--listen-client-urls="+u(etcdClient), "--advertise-client-urls="+u(etcdClient),
		"--listen-peer-urls="+u(etcdPeer), "--initial-advertise-peer-urls="+u(etcdPeer),
		"--initial-cluster=sluice="+u(etcdPeer), "--listen-metrics-urls="+u(etcdMetrics),
		"--log-level=warn"); err != nil {
		return nil, err
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if err := c.waitFor("etcd", 2*time.Minute, func() bool {
		resp, err := plain.Get(u(etcdClient) + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return nil, err
	}

	// kube-apiserver
	if err := c.start("kube-apiserver", filepath.Join(c.kubeBin, "kube-apiserver"),
		"--etcd-servers="+u(etcdClient),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+f("server.crt"), "--tls-private-key-file="+f("server.key"),
		"--client-ca-file="+f("ca.crt"),
		"--service-account-key-file="+f("sa.pub"), "--service-account-signing-key-file="+f("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--endpoint-reconciler-type=none",
		"--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,ResourceQuota,PodSecurity",
		"--cert-dir="+f("apiserver-certs")); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f("admin.crt"), f("admin.key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(f("ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
	if err := c.waitFor("kube-apiserver", 3*time.Minute, func() bool {
		resp, err := c.client.Get(c.server + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return nil, err
	}
	if err := c.writeKubeconfig(); err != nil {
		return nil, err
	}

	// kube-controller-manager: ReplicaSets, pods, service accounts. The
	// controllers that need nodes or volumes are off.
	if err := c.start("kube-controller-manager", filepath.Join(c.kubeBin, "kube-controller-manager"),
		"--kubeconfig="+c.kubeconfig, "--authentication-kubeconfig="+c.kubeconfig, "--authorization-kubeconfig="+c.kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort), "--leader-elect=false",
		"--service-account-private-key-file="+f("sa.key"), "--root-ca-file="+f("ca.crt"),
		"--use-service-account-credentials=false",
		"--controllers=*,-nodeipam,-nodelifecycle,-persistentvolume-binder,-attachdetach,-persistentvolume-expander"); err != nil {
		return nil, err
	}
	if err := c.waitFor("kube-controller-manager (serviceaccount/default)", 3*time.Minute, func() bool {
		return c.get("/api/v1/namespaces/default/serviceaccounts/default", nil) == nil
	}); err != nil {
		return nil, err
	}

	// prometheus-operator's CRDs (server-side: the large ones exceed the
	// client-side annotation limit).
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.kubectl(ctx, "", "apply", "--server-side", "-f", c.crdDir); err != nil {
		return nil, fmt.Errorf("apply prometheus-operator CRDs: %w\n%s", err, out)
	}
	if out, err := c.kubectl(ctx, "", "apply", "--server-side", "-f", filepath.Join(repoRoot, "test/deploy/testdata/kserve-crds.yaml")); err != nil {
		return nil, fmt.Errorf("apply the KServe stand-in CRDs: %w\n%s", err, out)
	}
	// Established can race once right after the apply: poll the condition.
	if err := c.waitFor("CRDs established", 2*time.Minute, func() bool {
		out, err := c.kubectl(ctx, "", "wait", "--for=condition=Established", "crd", "--all", "--timeout=10s")
		return err == nil && !strings.Contains(out, "error")
	}); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "deploy: control plane (etcd, kube-apiserver, kube-controller-manager) up at %s in %s\n", c.server, time.Since(start).Round(time.Second))
	ok = true
	return c, nil
}

func (c *controlPlane) start(name, bin string, args ...string) error {
	log := filepath.Join(c.dir, name+".log")
	lf, err := os.Create(log)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	// A test binary killed by its timeout takes the control plane with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return nil
}

// waitFor polls cond until it holds, any process exits, or the deadline.
func (c *controlPlane) waitFor(what string, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return nil
		}
		for _, p := range c.procs {
			if p.exited() {
				return fmt.Errorf("waiting for %s: %s exited:\n%s", what, p.name, p.tail())
			}
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range c.procs {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", p.name, p.tail())
			}
			return fmt.Errorf("%s not ready after %s\n%s", what, limit, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// get fetches an API path as the admin and decodes the JSON into v (nil:
// only the status matters).
func (c *controlPlane) get(path string, v any) error {
	resp, err := c.client.Get(c.server + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body.String())
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(body.Bytes(), v)
}

// env is the environment kubectl and helm run with: the cluster's
// kubeconfig, helm's folders inside the test's, both on PATH.
func (c *controlPlane) env(helmPath string) []string {
	path := c.kubeBin
	if helmPath != "" {
		path = filepath.Dir(helmPath) + string(os.PathListSeparator) + path
	}
	return []string{
		"KUBECONFIG=" + c.kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(c.dir, "helm", "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(c.dir, "helm", "config"),
		"HELM_DATA_HOME=" + filepath.Join(c.dir, "helm", "data"),
		"PATH=" + path + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
}

// kubectl runs kubectl against the cluster, with stdin when not empty.
func (c *controlPlane) kubectl(ctx context.Context, stdin string, args ...string) (string, error) {
	return c.run(ctx, stdin, filepath.Join(c.kubeBin, "kubectl"), args...)
}

func (c *controlPlane) run(ctx context.Context, stdin, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), c.env("")...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *controlPlane) writeKubeconfig() error {
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	f := func(name string) string { return filepath.Join(c.dir, name) }
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, certificate-authority: %q}
users:
- name: admin
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`, c.server, f("ca.crt"), f("admin.crt"), f("admin.key"))
	return os.WriteFile(c.kubeconfig, []byte(cfg), 0o600)
}

// writeCerts makes a CA, the API server's certificate, the admin's client
// certificate (group system:masters) and the service-account key pair.
func (c *controlPlane) writeCerts() error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, _ := x509.ParseCertificate(caDER)
	if err := c.writePEM("ca.crt", "CERTIFICATE", caDER); err != nil {
		return err
	}
	leaf := func(name string, serial int64, tmpl *x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := c.writePEM(name+".crt", "CERTIFICATE", der); err != nil {
			return err
		}
		return c.writePEM(name+".key", "EC PRIVATE KEY", kb)
	}
	if err := leaf("server", 2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return err
	}
	if err := leaf("admin", 3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	if err := c.writePEM("sa.key", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return err
	}
	return c.writePEM("sa.pub", "PUBLIC KEY", pub)
}

func (c *controlPlane) writePEM(name, typ string, der []byte) error {
	return os.WriteFile(filepath.Join(c.dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// freePorts reserves n loopback ports at once (all held until each is
// known, so they differ) and releases them for the processes.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
