package perf

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses.
	st, ok := parseProcStat("42 (gunicorn: worker (x)) S 7 42 42 0 -1 4194560 100 0 0 0 250 31 5 2 20 0 1 0 100 0 0")
	require.True(t, ok)
	require.Equal(t, procStat{ppid: 7, utime: 250, stime: 31, cutime: 5, cstime: 2}, st)
	for _, bad := range []string{"", "42 (x", "42 (x) S 7", "42 (x) S seven 1 1 0 -1 0 0 0 0 0 1 1 0 0"} {
		_, ok := parseProcStat(bad)
		require.False(t, ok, bad)
	}
}

// writeProc lays out a fake /proc with one stat file per pid.
func writeProc(t *testing.T, stats map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, stat := range stats {
		dir := filepath.Join(root, strconv.Itoa(pid))
		require.NoError(t, os.MkdirAll(dir, 0o750))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o600))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "self"), 0o750)) // not a pid: ignored
	return root
}

func TestProcCPUSumsTheProcessTree(t *testing.T) {
	line := func(pid, ppid int, ut, st, cut, cst int) string {
		return strconv.Itoa(pid) + " (p) S " + strconv.Itoa(ppid) + " 0 0 0 -1 0 0 0 0 0 " +
			strconv.Itoa(ut) + " " + strconv.Itoa(st) + " " + strconv.Itoa(cut) + " " + strconv.Itoa(cst) + " 20 0 1 0"
	}
	root := writeProc(t, map[int]string{
		10: line(10, 1, 1, 1, 3, 0),     // gunicorn master; a reaped worker's 3 ticks
		11: line(11, 10, 100, 20, 0, 0), // worker
		12: line(12, 10, 50, 5, 0, 0),   // worker
		13: line(13, 11, 7, 0, 0, 0),    // a worker's child
		20: line(20, 1, 999, 999, 0, 0), // someone else
	})
	got, err := procCPU(root, []int{10})
	require.NoError(t, err)
	require.Equal(t, time.Duration(1+1+3+100+20+50+5+7)*clockTick, got)

	got, err = procCPU(root, []int{12, 20})
	require.NoError(t, err)
	require.Equal(t, time.Duration(55+1998)*clockTick, got)

	_, err = procCPU(root, []int{99})
	require.ErrorContains(t, err, "server process 99 not found")
	_, err = procCPU(filepath.Join(root, "missing"), []int{10})
	require.ErrorIs(t, err, errNoProc)
}

func TestProcCPUOfThisProcess(t *testing.T) {
	before, err := procCPU("/proc", []int{os.Getpid()})
	require.NoError(t, err)
	// Burn at least a few clock ticks, bounded in time.
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
	}
	after, err := procCPU("/proc", []int{os.Getpid()})
	require.NoError(t, err)
	require.Greater(t, after, before, "200 ms of spinning shows in /proc")
	require.Positive(t, selfCPU())
}

func TestRunMeasuresServerCPU(t *testing.T) {
	f := &fakeModel{}
	srv := newFakeHTTP(t, f, false) // served by this process
	res, err := Run(t.Context(), quick(Options{
		Model: "m", URL: srv.URL, Concurrency: []int{2}, ServerPIDs: []int{os.Getpid()},
	}))
	require.NoError(t, err)
	require.Len(t, res, 1)
	r := res[0]
	require.True(t, r.CPUMeasured)
	require.GreaterOrEqual(t, r.ServerCPU, time.Duration(0))
	require.GreaterOrEqual(t, r.ServerCPU, r.ClientCPU-3*clockTick,
		"the server here is this whole process, the load generator included")

	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, res, true))
	rows, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	per, err := strconv.ParseFloat(rows[1][col["Server CPU per Inference"]], 64)
	require.NoError(t, err)
	require.InDelta(t, float64(r.CPUPerInference(r.ServerCPU))/1e3, per, 0.1)

	_, err = Run(t.Context(), quick(Options{Model: "m", URL: srv.URL, ServerPIDs: []int{1 << 30}}))
	require.ErrorContains(t, err, "server CPU")
}

func TestCPUPerInference(t *testing.T) {
	r := Result{Requests: 90, Errors: 10, Batch: 2}
	require.Equal(t, 5*time.Microsecond, r.CPUPerInference(time.Millisecond))
	require.Zero(t, Result{}.CPUPerInference(time.Second))
}
