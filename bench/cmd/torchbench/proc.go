package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Sluice builds for.
const clockTick = 10 * time.Millisecond

// procStat is the part of /proc/<pid>/stat the harness needs.
type procStat struct {
	Comm   string
	PPID   int
	UTime  uint64 // clock ticks, all threads
	STime  uint64
	CUTime uint64 // reaped children
	CSTime uint64
}

var errStat = errors.New("malformed /proc stat line")

// parseStat reads one /proc/<pid>/stat line. The command name is in
// parentheses and may itself hold spaces and parentheses, so the fields
// after it are found from the last ')'.
func parseStat(s string) (procStat, error) {
	open := strings.IndexByte(s, '(')
	closing := strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return procStat{}, errStat
	}
	st := procStat{Comm: s[open+1 : closing]}
	f := strings.Fields(s[closing+1:])
	// f[0] is field 3 (state); utime is field 14, so f[11].
	if len(f) < 15 {
		return procStat{}, errStat
	}
	var err error
	if st.PPID, err = strconv.Atoi(f[1]); err != nil {
		return procStat{}, fmt.Errorf("%w: ppid %q", errStat, f[1])
	}
	for i, dst := range []*uint64{&st.UTime, &st.STime, &st.CUTime, &st.CSTime} {
		v, err := strconv.ParseInt(f[11+i], 10, 64)
		if err != nil || v < 0 {
			return procStat{}, fmt.Errorf("%w: field %d %q", errStat, 14+i, f[11+i])
		}
		*dst = uint64(v)
	}
	return st, nil
}

// treeCPU is the CPU time of a process tree at one moment, split between
// the root process (Sluice's Go process, gunicorn's master) and everything
// below it (Python workers, gunicorn workers), reaped children included.
type treeCPU struct {
	Root     time.Duration
	Children time.Duration
	NChild   int // live descendant processes
	Comms    map[string]int
}

// Total is the tree's CPU time.
func (t treeCPU) Total() time.Duration { return t.Root + t.Children }

// sub returns the CPU spent between then and t.
func (t treeCPU) sub(then treeCPU) treeCPU {
	return treeCPU{Root: t.Root - then.Root, Children: t.Children - then.Children, NChild: t.NChild, Comms: t.Comms}
}

// readTree snapshots the tree rooted at root from procRoot (/proc).
// Descendants are found by parent pid over every process, so grandchildren
// (a worker's own helpers) count too.
func readTree(procRoot string, root int) (treeCPU, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return treeCPU{}, fmt.Errorf("read %s: %w", procRoot, err)
	}
	stats := map[int]procStat{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		if st, err := parseStat(string(b)); err == nil {
			stats[pid] = st
		}
	}
	rs, ok := stats[root]
	if !ok {
		return treeCPU{}, fmt.Errorf("read tree of pid %d: not running", root)
	}
	out := treeCPU{
		Root:     time.Duration(rs.UTime+rs.STime) * clockTick,
		Children: time.Duration(rs.CUTime+rs.CSTime) * clockTick,
		Comms:    map[string]int{},
	}
	children := map[int][]int{}
	for pid, st := range stats {
		children[st.PPID] = append(children[st.PPID], pid)
	}
	queue := append([]int(nil), children[root]...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		st := stats[pid]
		// A child's own reaped children are in its cutime, so summing
		// utime+stime+cutime+cstime over live descendants counts each
		// process once.
		out.Children += time.Duration(st.UTime+st.STime+st.CUTime+st.CSTime) * clockTick
		out.NChild++
		out.Comms[st.Comm]++
		queue = append(queue, children[pid]...)
	}
	return out, nil
}
