package docs_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ml/sluice/internal/testutil/harness"
)

// TestDocCommands runs every command shown in a ```sh or ```console block
// of README.md and docs/*.md, in the order of each file, as a user would
// paste them, with these substitutions:
//
//   - the commands run in a sandbox: a copy of examples/parcel-eta (the
//     models and requests linked), bin/sluice and sluice on PATH (the
//     binary under test), models/ linked to examples/models, /tmp/ replaced
//     by a private folder;
//   - every default port (8000, 8001, 8002, 6566, 8080, 8081, 9901) is a
//     free one, in the command's text and, for "sluice serve -c", through
//     the SLUICE_* variables the example config reads;
//   - "make build" is the build TestMain did; "make demo" runs
//     scripts/demo.sh in the sandbox; "go run" of the data generator is
//     the built generator, of another package a build of it;
//   - a command that starts a server (sluice serve, model-server,
//     feature-server) runs in the background until the file's last block
//     is done, and the next command runs once it answers; a new server
//     stops the earlier ones that hold its ports;
//   - curl fails on an HTTP error status (--fail-with-body), and every
//     command must exit 0.
//
// A block that needs a server the doc started elsewhere names it in an
// HTML comment on the line before it: <!-- with: sluice serve -c ... -->.
// A block that cannot run here (it needs a cluster, a remote host, a
// recording made by a long shadow run) is marked the same way:
// <!-- illustrative: why -->. The list of such blocks is printed; keep it
// short.
func TestDocCommands(t *testing.T) {
	var mu sync.Mutex
	var illustrative []string
	t.Cleanup(func() {
		t.Logf("illustrative blocks and test-suite commands (not run): %d\n  %s", len(illustrative), strings.Join(illustrative, "\n  "))
	})
	for _, f := range docFiles(t) {
		blocks := docBlocks(t, f)
		if len(blocks) == 0 {
			continue
		}
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			t.Parallel() // each file has its own sandbox and ports
			sb := newSandbox(t)
			for _, b := range blocks {
				if b.illustrative != "" {
					mu.Lock()
					illustrative = append(illustrative, fmt.Sprintf("%s:%d (%s)", f, b.line, b.illustrative))
					mu.Unlock()
					continue
				}
				for _, c := range b.commands {
					if strings.HasPrefix(c.text, "go test ") {
						// The test suite itself: it runs as part of it.
						mu.Lock()
						illustrative = append(illustrative, fmt.Sprintf("%s:%d (%s: part of the test suite)", f, c.line, c.text))
						mu.Unlock()
					}
				}
				if b.with != "" {
					for w := range strings.SplitSeq(b.with, "; ") {
						sb.run(t, fmt.Sprintf("%s:%d (with:)", f, b.line-1), w)
					}
				}
				for _, c := range b.commands {
					if !strings.HasPrefix(c.text, "go test ") {
						sb.run(t, fmt.Sprintf("%s:%d", f, c.line), c.text)
					}
				}
			}
		})
	}
}

type docBlock struct {
	line         int
	illustrative string // why the block is not run; empty: it runs
	with         string // a server command the block needs running first
	commands     []docCommand
}

type docCommand struct {
	line int
	text string
}

var (
	illustrativeMark = regexp.MustCompile(`^<!--\s*illustrative:\s*(.*?)\s*-->\s*$`)
	withMark         = regexp.MustCompile(`^<!--\s*with:\s*(.*?)\s*-->\s*$`)
)

// docBlocks extracts the shell blocks of a Markdown file: in ```sh every
// line is a command (a trailing \ or a heredoc continues it); in
// ```console only lines starting with "$ " are, the rest is output.
func docBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoDir, file))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		lang, ok := strings.CutPrefix(lines[i], "```")
		if !ok || (lang != "sh" && lang != "console") {
			if ok { // skip other fenced blocks whole
				for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				}
			}
			continue
		}
		blk := docBlock{line: i + 1}
		if i > 0 {
			if m := illustrativeMark.FindStringSubmatch(lines[i-1]); m != nil {
				blk.illustrative = m[1]
			}
			if m := withMark.FindStringSubmatch(lines[i-1]); m != nil {
				blk.with = m[1]
			}
		}
		var cur *docCommand
		heredoc := ""
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			l := lines[i]
			switch {
			case cur != nil && heredoc != "":
				cur.text += "\n" + l
				if strings.TrimSpace(l) == heredoc {
					heredoc = ""
					cur = nil
				}
				continue
			case cur != nil:
				cur.text += "\n" + l
			case lang == "console" && strings.HasPrefix(l, "$ "):
				blk.commands = append(blk.commands, docCommand{line: i + 1, text: strings.TrimPrefix(l, "$ ")})
				cur = &blk.commands[len(blk.commands)-1]
			case lang == "sh" && strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#"):
				blk.commands = append(blk.commands, docCommand{line: i + 1, text: l})
				cur = &blk.commands[len(blk.commands)-1]
			default:
				continue
			}
			if m := heredocStart.FindStringSubmatch(l); m != nil {
				heredoc = m[1]
				continue
			}
			if !strings.HasSuffix(strings.TrimRight(l, " "), "\\") {
				cur = nil
			}
		}
		out = append(out, blk)
	}
	return out
}

var heredocStart = regexp.MustCompile(`<<-?'?"?([A-Z]+)'?"?`)

// defaultPorts are the listeners a doc command may name.
var defaultPorts = []struct {
	port int
	env  string
}{
	{8000, "SLUICE_HTTP_PORT"},
	{8001, "SLUICE_GRPC_PORT"},
	{8002, "SLUICE_METRICS_PORT"},
	{6566, "SLUICE_FEATURE_PORT"},
	{8080, "SLUICE_GATEWAY_PORT"},
	{8081, "SLUICE_GATEWAY_GRPC_PORT"},
	{9901, "SLUICE_ADMIN_PORT"},
}

// sandbox is where one doc file's commands run.
type sandbox struct {
	dir, tmp string
	ports    map[int]int // default → this sandbox's
	env      []string
	servers  []*docServer
}

type docServer struct {
	cmd   *exec.Cmd
	ports []int // the default ports it holds
	out   *syncBuffer
	done  chan struct{}
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	sb := &sandbox{dir: t.TempDir(), tmp: t.TempDir(), ports: map[int]int{}}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(sb.dir, "bin"), 0o755))
	must(os.Symlink(binPath, filepath.Join(sb.dir, "bin", "sluice")))
	must(os.MkdirAll(filepath.Join(sb.dir, "examples", "parcel-eta", "features"), 0o755))
	for _, l := range []string{"models", "requests", "torchscript", "reference"} {
		if _, err := os.Stat(filepath.Join(repoDir, "examples", l)); err == nil {
			must(os.Symlink(filepath.Join(repoDir, "examples", l), filepath.Join(sb.dir, "examples", l)))
		}
	}
	must(os.Symlink(filepath.Join(repoDir, "examples", "models"), filepath.Join(sb.dir, "models")))
	copyFile(t, "examples/parcel-eta/sluice.yaml", filepath.Join(sb.dir, "examples/parcel-eta/sluice.yaml"))
	ymls, err := filepath.Glob(filepath.Join(repoDir, "examples/parcel-eta/features/*.yaml"))
	must(err)
	for _, y := range ymls {
		copyFile(t, filepath.Join("examples/parcel-eta/features", filepath.Base(y)), filepath.Join(sb.dir, "examples/parcel-eta/features", filepath.Base(y)))
	}
	sb.env = append(os.Environ(),
		"PATH="+filepath.Join(sb.dir, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
		"SLUICE_ONNXRUNTIME_LIB="+ortLib, "SLUICE_DEMO_API_KEY=demo-key", "ADMIN_KEY=docs-admin-key")
	for _, p := range defaultPorts {
		sb.ports[p.port] = freePort(t)
		sb.env = append(sb.env, fmt.Sprintf("%s=%d", p.env, sb.ports[p.port]))
	}
	t.Cleanup(func() {
		for _, s := range sb.servers {
			s.stop()
		}
	})
	return sb
}

func copyFile(t *testing.T, rel, dst string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	portRef     = regexp.MustCompile(`(localhost|127\.0\.0\.1|0\.0\.0\.0)?:(8000|8001|8002|6566|8080|8081|9901)\b`)
	serverStart = regexp.MustCompile(`^(?:[A-Z_]+=\S+\s+)*(?:bin/)?sluice\s+(serve|model-server|feature-server)\b`)
	goRun       = regexp.MustCompile(`go run \./[^\s]+\s`)
	exportVar   = regexp.MustCompile(`^export ([A-Za-z_][A-Za-z0-9_]*)=`)
	adminCmd    = regexp.MustCompile(`^(?:[A-Z_]+=\S+\s+)*(?:bin/)?sluice\s+(status|rollout)\b`)
)

// rewrite applies the substitutions to one command.
func (sb *sandbox) rewrite(text string) string {
	text = portRef.ReplaceAllStringFunc(text, func(m string) string {
		host, port, _ := strings.Cut(m, ":")
		n, _ := strconv.Atoi(port)
		return fmt.Sprintf("%s:%d", host, sb.ports[n])
	})
	text = strings.ReplaceAll(text, "/tmp/", sb.tmp+"/")
	text = strings.ReplaceAll(text, "go run ./examples/parcel-eta/features/gen", genPath)
	// Other "go run ./pkg": built from the module, run in the sandbox.
	text = goRun.ReplaceAllStringFunc(text, func(m string) string {
		pkg := strings.TrimSpace(strings.TrimPrefix(m, "go run "))
		exe := filepath.Join(sb.dir, "bin", "gorun-"+strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
		return fmt.Sprintf("go build -C %s -o %s %s && %s ", repoDir, exe, pkg, exe)
	})
	text = strings.ReplaceAll(text, "curl -s ", "curl -sS --fail-with-body ")
	if adminCmd.MatchString(text) && !strings.Contains(text, "--admin") {
		text += fmt.Sprintf(" --admin http://127.0.0.1:%d", sb.ports[9901])
	}
	return text
}

// run runs one doc command.
func (sb *sandbox) run(t *testing.T, where, text string) {
	t.Helper()
	cmdText := sb.rewrite(text)
	if strings.TrimSpace(cmdText) == "make build" {
		return // TestMain built the binary
	}
	if strings.HasPrefix(strings.TrimSpace(cmdText), "make demo") {
		// scripts/demo.sh on the sandbox's ports, working in the
		// sandbox's examples/ as it does in the repository's.
		sb.startServer(t, where, "demo", fmt.Sprintf("SLUICE_DEMO_DIR=%s SLUICE_BIN=%s SLUICE_GEN=%s %s",
			filepath.Join(sb.dir, "examples"), binPath, genPath, filepath.Join(repoDir, "scripts", "demo.sh")))
		return
	}
	if m := serverStart.FindStringSubmatch(cmdText); m != nil {
		sb.startServer(t, where, m[1], strings.TrimSuffix(strings.TrimSpace(strings.SplitN(cmdText, " # ", 2)[0]), "&"))
		return
	}
	if m := exportVar.FindStringSubmatch(cmdText); m != nil {
		// export lasts for the rest of the file, as in the reader's shell.
		out, err := exec.Command("bash", "-c", cmdText+`; printf '%s' "$`+m[1]+`"`).Output()
		if err != nil {
			t.Errorf("%s: %s: %v", where, text, err)
			return
		}
		sb.env = append(sb.env, m[1]+"="+string(out))
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", cmdText)
	cmd.Dir, cmd.Env = sb.dir, sb.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s: %s\n(ran: %s)\n%v\n%s\n%s", where, text, cmdText, err, out, sb.serverLogs())
		return
	}
	if strings.Contains(text, "/get-online-features") {
		// README's feature curls: the example data is fresh, so every
		// value asked for is there, but the stream view route_live's: no
		// delivery event is published here (NOT_FOUND, as README says).
		if !allPresentButStream(out) {
			t.Errorf("%s: want every value PRESENT (route_live's NOT_FOUND):\n%s", where, out)
		}
	}
}

// startServer starts a server command in the background, on the sandbox's
// ports, after stopping earlier servers that hold any of them, and waits
// until it answers.
func (sb *sandbox) startServer(t *testing.T, where, kind, text string) {
	t.Helper()
	var ports []int
	var ready string
	switch {
	case kind == "feature-server":
		ports = []int{6566}
		text += fmt.Sprintf(" --port %d", sb.ports[6566])
		ready = fmt.Sprintf("http://127.0.0.1:%d/health", sb.ports[6566])
	case kind == "demo" || strings.Contains(text, " -c ") || strings.Contains(text, " --config "):
		ports = []int{8000, 8001, 8002, 6566, 8080, 8081, 9901}
		ready = fmt.Sprintf("http://127.0.0.1:%d/ready", sb.ports[8080])
	default:
		ports = []int{8000, 8001, 8002}
		text += fmt.Sprintf(" --address 127.0.0.1 --http-port %d --grpc-port %d --metrics-port %d", sb.ports[8000], sb.ports[8001], sb.ports[8002])
		ready = fmt.Sprintf("http://127.0.0.1:%d/v2/health/live", sb.ports[8000])
	}
	for _, s := range sb.servers {
		for _, p := range s.ports {
			for _, q := range ports {
				if p == q {
					s.stop()
				}
			}
		}
	}
	s := &docServer{ports: ports, out: &syncBuffer{}, done: make(chan struct{})}
	s.cmd = exec.Command("bash", "-c", text) // bash execs a single command itself
	s.cmd.Dir, s.cmd.Env = sb.dir, sb.env
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	sb.servers = append(sb.servers, s)
	harness.WaitFor(t, 3*time.Minute, 100*time.Millisecond, where+": "+text+" ready", func() (bool, string) {
		select {
		case <-s.done:
			t.Fatalf("%s: %s exited:\n%s", where, text, s.out.String())
		default:
		}
		res, err := http.Get(ready)
		if err != nil {
			return false, fmt.Sprintf("%v; output:\n%s", err, s.out.String())
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Sprintf("%d; output:\n%s", res.StatusCode, s.out.String())
	})
}

func (s *docServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

func (sb *sandbox) serverLogs() string {
	var b strings.Builder
	for _, s := range sb.servers {
		sc := bufio.NewScanner(strings.NewReader(s.out.String()))
		var last []string
		for sc.Scan() {
			last = append(last, sc.Text())
			if len(last) > 15 {
				last = last[1:]
			}
		}
		fmt.Fprintf(&b, "server %v (last lines):\n%s\n", s.cmd.Args, strings.Join(last, "\n"))
	}
	return b.String()
}

// allPresentButStream reports whether a /get-online-features answer has
// every value PRESENT, those of the stream feature view route_live
// NOT_FOUND.
func allPresentButStream(out []byte) bool {
	var resp struct {
		Metadata struct {
			FeatureNames []string `json:"feature_names"`
		} `json:"metadata"`
		Results []struct {
			Statuses []string `json:"statuses"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &resp); err != nil || len(resp.Results) != len(resp.Metadata.FeatureNames) || len(resp.Results) == 0 {
		return false
	}
	for i, r := range resp.Results {
		want := "PRESENT"
		if strings.HasPrefix(resp.Metadata.FeatureNames[i], "route_live") {
			want = "NOT_FOUND"
		}
		for _, st := range r.Statuses {
			if st != want {
				return false
			}
		}
	}
	return true
}
