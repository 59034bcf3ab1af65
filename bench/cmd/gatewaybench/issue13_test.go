package main

import (
	"strings"
	"testing"
	"time"
)

func TestIssue13Targets(t *testing.T) {
	us := time.Microsecond
	h := hopWith(200*us, 300*us, 350*us) // added p99: gateway 150 µs vs HAProxy 100 µs
	for i := range h.Rows {
		switch h.Rows[i].Target {
		case targetGateway:
			h.Rows[i].CPU, h.Rows[i].Wall = map[string]time.Duration{cpuProxy: 10 * time.Millisecond}, time.Second
		case targetHAProxy:
			h.Rows[i].CPU, h.Rows[i].Wall = map[string]time.Duration{cpuProxy: 8 * time.Millisecond}, time.Second
		}
	}
	rep := &report{Hop: h, Chain: &chainResult{Rows: []chainRow{
		{Rate: 2000, Res: constRes(2000, 1000, 3*time.Millisecond)},
		{Rate: 3000, Res: constRes(3000, 1000, 20*time.Millisecond)}, // p99 over 15 ms
	}}}
	ts := issue13Targets(rep)
	if len(ts) != 3 {
		t.Fatalf("got %d targets", len(ts))
	}
	cpu, p99, chain := ts[0], ts[1], ts[2]
	if !cpu.known || !cpu.met || !strings.Contains(cpu.measured, "1.25×") {
		t.Errorf("CPU target: %+v", cpu)
	}
	if !p99.known || !p99.met || !strings.Contains(p99.measured, "1.50×") {
		t.Errorf("p99 target: %+v", p99)
	}
	if !chain.known || chain.met || !strings.Contains(chain.measured, "**2000/s**") {
		t.Errorf("chain target: %+v", chain)
	}
	for _, tt := range issue13Targets(&report{}) {
		if tt.known {
			t.Errorf("%s: known without rows", tt.name)
		}
	}
	if md := render(rep); !strings.Contains(md, "| Full chain: ≥ 3000 predictions/s with p99 ≤ 15ms (issue 13) |") {
		t.Errorf("report lacks the issue 13 chain target:\n%s", md)
	}
}
