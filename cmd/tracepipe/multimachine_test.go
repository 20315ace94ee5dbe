package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The scenario: two `run`s with relay sinks (machine_id 101 and
// 202) into `serve`. With --merge the merged trace carries the receiver's
// host packets and a remote_clock_sync per machine, and `check` finds it
// clean; without, each per-machine file is clean on its own.
func TestServeTwoMachinesCheckClean(t *testing.T) {
	for _, merge := range []bool{true, false} {
		t.Run(fmt.Sprintf("merge=%v", merge), func(t *testing.T) {
			out := t.TempDir()
			metricsAddr := freeLoopbackAddr(t)
			addr, stop := startServe(t, serveFlags{listen: "127.0.0.1:0", out: out, merge: merge, metricsAddr: metricsAddr})
			for _, m := range []int{101, 202} {
				file := filepath.Join(t.TempDir(), "local.pftrace")
				cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    relay:\n      address: %s\n      hostname: host-%d\n      machine_id: %d\n", addr, m, m))
				if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
					t.Fatalf("run (machine %d): exit %d\n%s", m, code, stderr)
				}
			}
			// One round per machine: each session's connection opens with one,
			// and the next is 30 s away. Per-machine files take none.
			want := map[bool]string{true: "2", false: "0"}[merge]
			if body := scrape(t, metricsAddr); !strings.Contains(body, "tracepipe_serve_clock_sync_rounds_total "+want+"\n") {
				t.Errorf("metrics: want tracepipe_serve_clock_sync_rounds_total %s\n%s", want, grepLines(body, "clock_sync"))
			}
			stop()
			names, _ := filepath.Glob(filepath.Join(out, "*.pftrace"))
			if want := map[bool]int{true: 1, false: 2}[merge]; len(names) != want {
				t.Fatalf("%s holds %v, want %d traces", out, names, want)
			}
			for _, name := range names {
				if stdout, stderr, code := runCLI(t, "check", name); code != exitOK {
					t.Errorf("check %s: exit %d\n%s%s", filepath.Base(name), code, stdout, stderr)
				}
			}
			if !merge {
				return
			}
			syncs := map[uint32]int{}
			var stripped []byte // the merged trace as it was before clock sync
			for _, p := range readTracePackets(t, filepath.Join(out, remote.MergedName)) {
				if info, _ := tracefile.DecodePacket(p); info.PayloadField == tracefile.FieldRemoteClockSync {
					syncs[info.MachineID]++
					continue
				}
				stripped = tracefile.AppendRecord(stripped, p)
			}
			if len(syncs) != 2 || syncs[1] == 0 || syncs[2] == 0 {
				t.Errorf("remote_clock_sync packets per machine_id: %v, want machines 1 and 2", syncs)
			}
			name := filepath.Join(t.TempDir(), "no-sync.pftrace")
			if err := os.WriteFile(name, stripped, 0o644); err != nil {
				t.Fatal(err)
			}
			stdout, _, code := runCLI(t, "check", name)
			if code != exitProblems || !strings.Contains(stdout, "clock_sync_failure_no_path") {
				t.Errorf("check of the merged trace without remote_clock_sync: exit %d, want %d naming clock_sync_failure_no_path\n%s", code, exitProblems, stdout)
			}
		})
	}
}
