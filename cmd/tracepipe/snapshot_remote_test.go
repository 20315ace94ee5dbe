package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Snapshots reach every sink as separate traces: a session with a file,
// a relay and a nats sink (the last with a CEL filter) takes a snapshot
// on a trigger its data source fires. `tracepipe serve` stores the
// relay's copy, and `serve --from-nats` the nats one, each as a file of
// its own beside the live session's, named by the snapshot pattern; the
// relay's holds the file sink's snapshot packets, the nats one the same
// without what its filter drops.
func TestSnapshotsReachServe(t *testing.T) {
	natsURL := startNATSServer(t)
	relayOut := t.TempDir()
	addr, stopRelay := startServe(t, serveFlags{listen: "127.0.0.1:0", out: relayOut})
	dir := t.TempDir()
	file := filepath.Join(dir, "live.pftrace")
	cfg := filepath.Join(dir, "session.yaml")
	// The snapshot clones what the live session has not read yet: with a
	// read every 100 ms it held 0.1 s of data, under load as little as 19
	// packets. A period longer than the session (2,000 packets per writer
	// at 1,000/s) leaves the snapshot everything written before the trigger.
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`duration: 30s
write_into_file: true
file_write_period: 10s
buffers: [{size_kb: 8192}]
trigger_config:
  trigger_mode: clone_snapshot
  triggers: [{name: snap_now}]
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: 2, rate: 1000, packet_size: 256, max_packets: 2000, trigger: snap_now, trigger_after_packets: 500}
sinks:
  - type: file
    path: %s
  - type: relay
    relay: {address: %s, hostname: sender-s}
  - type: nats
    filter: 'packet.kind != "track_event"'
    nats: {url: %s, subject: traces.snap, create_stream: true}
`, file, addr, natsURL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	stopRelay()
	local := filepath.Join(dir, "live.snap-1-snap_now.pftrace")
	want := tracetest.ReadAll(t, local)

	relaySnap := onlySnapshot(t, relayOut, "*.snap-1-snap_now.pftrace")
	sameDataPackets(t, want, tracetest.ReadAll(t, relaySnap), false)

	natsOut := t.TempDir()
	_, stopNATS := startServe(t, serveFlags{natsURL: natsURL, subject: "traces.snap", durable: "snap-test", out: natsOut})
	var natsSnap string
	waitUntil(t, "serve --from-nats stored the snapshot", 30*time.Second, func() bool {
		names, _ := filepath.Glob(filepath.Join(natsOut, "*.snap-1-snap_now.pftrace"))
		if len(names) != 1 {
			return false
		}
		natsSnap = names[0]
		pkts := tracetest.ReadAll(t, natsSnap)
		return len(pkts) > 0 && kindOf(t, pkts[len(pkts)-1]) == "trace_stats"
	})
	stopNATS()
	sameDataPackets(t, want, tracetest.ReadAll(t, natsSnap), true)
	// Beside each snapshot, the live session's own trace.
	for _, d := range []string{relayOut, natsOut} {
		if names, _ := filepath.Glob(filepath.Join(d, "*.pftrace")); len(names) != 2 {
			t.Errorf("%s holds %v; want the live trace and the snapshot", d, names)
		}
	}
}

func onlySnapshot(t *testing.T, dir, pattern string) string {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(names) != 1 {
		all, _ := filepath.Glob(filepath.Join(dir, "*"))
		t.Fatalf("%s: %v match %s, want one", dir, all, pattern)
	}
	return names[0]
}

func kindOf(t *testing.T, p []byte) string {
	t.Helper()
	info, err := tracefile.DecodePacket(p)
	if err != nil {
		t.Fatal(err)
	}
	return info.Kind()
}

// sameDataPackets asserts got holds want's packets in order, TraceStats
// aside (each destination counts its own), and without track events when
// filtered; got must hold the snapshot's trigger packet either way.
func sameDataPackets(t *testing.T, want, got [][]byte, filtered bool) {
	t.Helper()
	keep := func(pkts [][]byte, dropEvents bool) (out [][]byte, trig bool) {
		for _, p := range pkts {
			switch kindOf(t, p) {
			case "trace_stats":
				continue
			case "track_event":
				if dropEvents {
					continue
				}
			case "clone_snapshot_trigger":
				trig = true
			}
			out = append(out, p)
		}
		return out, trig
	}
	w, _ := keep(want, filtered)
	g, trig := keep(got, false)
	if !trig {
		t.Error("the remote snapshot has no clone_snapshot_trigger packet")
	}
	if len(g) != len(w) {
		t.Fatalf("remote snapshot: %d packets, want %d", len(g), len(w))
	}
	for i := range w {
		if !bytes.Equal(w[i], g[i]) {
			t.Fatalf("remote snapshot: packet %d (%s) differs from the local snapshot's", i, kindOf(t, g[i]))
		}
	}
	if all, _ := keep(want, false); len(all) < 100 {
		t.Fatalf("only %d packets in the snapshot: the test proves little", len(all))
	}
}

func waitUntil(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
