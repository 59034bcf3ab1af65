package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{
			name: "plain",
			line: "42 (sluice) S 1 42 42 0 -1 4194560 100 0 0 0 150 30 7 3 20 0 12 0 100 0 0",
			want: procStat{Comm: "sluice", PPID: 1, UTime: 150, STime: 30, CUTime: 7, CSTime: 3},
		},
		{
			name: "name with spaces and parentheses",
			line: "7 (a) b (c)) R 42 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 100 0 0",
			want: procStat{Comm: "a) b (c)", PPID: 42, UTime: 1, STime: 2, CUTime: 3, CSTime: 4},
		},
		{name: "truncated", line: "7 (x) S 1 2 3", wantErr: true},
		{name: "no name", line: "7 x S 1", wantErr: true},
		{name: "negative time", line: "7 (x) S 1 7 7 0 -1 0 0 0 0 0 -1 2 3 4 20 0 1 0 100", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseStat error = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Fatalf("parseStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add("42 (sluice) S 1 42 42 0 -1 4194560 100 0 0 0 150 30 7 3 20 0 12 0 100 0 0")
	f.Add("7 (a) b (c)) R 42 7 7 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 100 0 0")
	f.Add("(")
	f.Fuzz(func(t *testing.T, s string) {
		st, err := parseStat(s)
		if err == nil && !strings.Contains(s, "("+st.Comm+")") {
			t.Fatalf("parseStat(%q) comm %q is not the parenthesised name", s, st.Comm)
		}
	})
}

// writeProc writes a fake procfs entry.
func writeProc(t *testing.T, root string, pid, ppid int, comm string, u, s, cu, cs int) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	line := strings.Join([]string{
		strconv.Itoa(pid), "(" + comm + ")", "S", strconv.Itoa(ppid), "0 0 0 -1 0 0 0 0 0",
		strconv.Itoa(u), strconv.Itoa(s), strconv.Itoa(cu), strconv.Itoa(cs), "20 0 1 0 100 0 0",
	}, " ")
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReadTree(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 1, 0, "init", 1000, 1000, 0, 0)
	writeProc(t, root, 10, 1, "sluice", 100, 50, 5, 5) // 10 ticks of reaped workers
	writeProc(t, root, 11, 10, "python3", 200, 20, 0, 0)
	writeProc(t, root, 12, 10, "python3", 300, 30, 1, 1)
	writeProc(t, root, 13, 12, "helper", 4, 4, 0, 0) // a worker's own child
	writeProc(t, root, 20, 1, "other", 999, 999, 0, 0)
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := readTree(root, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := 150 * clockTick; got.Root != want {
		t.Errorf("Root = %v, want %v", got.Root, want)
	}
	if want := (10 + 220 + 332 + 8) * clockTick; got.Children != want {
		t.Errorf("Children = %v, want %v", got.Children, want)
	}
	if got.NChild != 3 || got.Comms["python3"] != 2 || got.Comms["helper"] != 1 {
		t.Errorf("NChild = %d, Comms = %v; want 3 descendants, 2 python3 and 1 helper", got.NChild, got.Comms)
	}
	if _, err := readTree(root, 99); err == nil {
		t.Error("readTree of a missing pid: no error")
	}
}

func TestParsePerfCSV(t *testing.T) {
	head := "Concurrency,Inferences/Second,Batch,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Server Overhead,Server Avg Batch,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,Requests,Errors,Stable,Server CPU per Inference,Client CPU per Inference\n"
	tests := []struct {
		name    string
		csv     string
		want    result
		wantErr bool
	}{
		{
			name: "sluice row",
			csv:  head + "32,7893.4,1,100,200,10,300,10,5,7.61,3640,5000,6000,10890,4000,23680,0,true,145.3,38.0\n",
			want: result{
				Throughput: 7893.4, P50: 3640 * time.Microsecond, P99: 10890 * time.Microsecond, AvgBatch: 7.61,
				Requests: 23680, Stable: true, ServerCPU: 145300 * time.Nanosecond, ClientCPU: 38 * time.Microsecond,
			},
		},
		{
			name: "peer row without server statistics",
			csv:  strings.Replace(head, "Concurrency", "Request Rate", 1) + "200,199.5,1,,,,,,,,2000,3000,3500,5000,2100,598,2,false,610.0,150.5\n",
			want: result{
				Throughput: 199.5, P50: 2 * time.Millisecond, P99: 5 * time.Millisecond,
				Requests: 598, Errors: 2, ServerCPU: 610 * time.Microsecond, ClientCPU: 150500 * time.Nanosecond,
			},
		},
		{name: "no server CPU", csv: head + "32,1,1,,,,,,,,1,1,1,1,1,1,0,true,,1.0\n", wantErr: true},
		{name: "two levels", csv: head + "1,1,1,,,,,,,,1,1,1,1,1,1,0,true,1,1\n1,1,1,,,,,,,,1,1,1,1,1,1,0,true,1,1\n", wantErr: true},
		{name: "missing column", csv: "Concurrency,Inferences/Second\n1,2\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got result
			err := parsePerfCSV(tt.csv, &got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parsePerfCSV error = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.Throughput != tt.want.Throughput || got.P50 != tt.want.P50 || got.P99 != tt.want.P99 ||
				got.AvgBatch != tt.want.AvgBatch || got.Requests != tt.want.Requests || got.Errors != tt.want.Errors ||
				got.Stable != tt.want.Stable || got.ServerCPU != tt.want.ServerCPU || got.ClientCPU != tt.want.ClientCPU {
				t.Fatalf("parsePerfCSV = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTargets(t *testing.T) {
	c32 := load{Concurrency: saturation}
	row := func(label, format, batching string, thr float64, cpu time.Duration) measured {
		return measured{
			rowSpec: rowSpec{Label: label, Format: format, Batching: batching, IsPeer: format == "peer"},
			Results: []result{{Load: c32, Throughput: thr, ServerCPU: cpu, Requests: 100}},
		}
	}
	rep := &report{Cfg: config{Levels: []int{saturation}}, Rows: []measured{
		row("Sluice, TorchScript, batching off", "TorchScript", "off", 1500, 400*time.Microsecond),
		row("Sluice, TorchScript, batching on", "TorchScript", "on", 3000, 250*time.Microsecond),
		row("Sluice, state_dict + model.py, batching on", "state_dict", "on", 1900, 200*time.Microsecond),
		row("Sluice, ONNX (parcel_eta as shipped)", "ONNX", "on", 9000, 50*time.Microsecond),
		row("Flask + gunicorn + PyTorch (peer)", "peer", "n/a", 1000, 500*time.Microsecond),
	}}
	cpu := rep.cpuVerdicts()
	if len(cpu) != 3 || cpu[0].Met || !cpu[1].Met || !cpu[2].Met {
		t.Fatalf("cpu verdicts = %+v; want the three PyTorch rows, off not met (0.8×), both on met (0.5×, 0.4×)", cpu)
	}
	if got := overall(cpu); got != "**met**" {
		t.Errorf("overall CPU = %s, want met (every batching-on row met)", got)
	}
	thr := rep.throughputVerdicts()
	if len(thr) != 2 || !thr[0].Met || thr[1].Met {
		t.Fatalf("throughput verdicts = %+v; want the two batching-on rows, 3× met and 1.9× not met", thr)
	}
	if got := overall(thr); got != "**not met**" {
		t.Errorf("overall throughput = %s, want not met", got)
	}
	md := rep.markdown()
	for _, want := range []string{"| Sluice, TorchScript, batching on | c=32 | 3000 | 3.00 |", "0.50×", "1.90× the peer"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	rep.Rows[4].Results[0].Errors = 3
	for _, v := range rep.cpuVerdicts() {
		if v.Met || !strings.Contains(v.Reason, "errors") {
			t.Errorf("with peer errors: %+v; want not met, reason naming the errors", v)
		}
	}
}
