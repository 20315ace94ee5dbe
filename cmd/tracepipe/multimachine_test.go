package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
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
			// The same trace without clock sync (remote_clock_sync removed, so
			// trace_processor bridges each machine by assumption), and without
			// the receiver's packets (its clock snapshot is the trace's only
			// one since the senders' are left out of a merged file, so no
			// trace clock is left): check flags both.
			syncs := map[uint32]int{}
			var noSync, before []byte
			for _, p := range tracetest.ReadAll(t, filepath.Join(out, remote.MergedName)) {
				info, _ := tracefile.DecodePacket(p)
				receiver := info.MachineID == 0 || info.SequenceID == 0
				if info.PayloadField == tracefile.FieldRemoteClockSync {
					syncs[info.MachineID]++
				} else {
					noSync = tracefile.AppendRecord(noSync, p)
				}
				if !receiver {
					before = tracefile.AppendRecord(before, p)
				}
			}
			if len(syncs) != 2 || syncs[1] == 0 || syncs[2] == 0 {
				t.Errorf("remote_clock_sync packets per machine_id: %v, want machines 1 and 2", syncs)
			}
			for what, tc := range map[string]struct {
				data []byte
				code string
			}{
				"without remote_clock_sync": {noSync, "remote_clock_assumed_aligned"},
				"without the receiver's":    {before, "missing_clock_snapshot"},
			} {
				name := filepath.Join(t.TempDir(), "variant.pftrace")
				if err := os.WriteFile(name, tc.data, 0o644); err != nil {
					t.Fatal(err)
				}
				stdout, _, code := runCLI(t, "check", name)
				if code != exitProblems || !strings.Contains(stdout, tc.code) {
					t.Errorf("check of the merged trace %s: exit %d, want %d naming %s\n%s", what, code, exitProblems, tc.code, stdout)
				}
			}
		})
	}
}
