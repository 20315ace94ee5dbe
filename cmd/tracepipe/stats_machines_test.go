package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// senderBatch is one batch of a sender: n track-event packets and its
// TraceStats (with the given sink loss).
func senderBatch(n int, dropped uint64) (data []byte, packets int, nbytes uint64) {
	add := func(p []byte) {
		data = tracefile.AppendRecord(data, p)
		packets++
		nbytes += uint64(len(p))
	}
	for i := range n {
		add(honestPacket(uint64(i)))
	}
	ts := tracefile.TraceStats{BufferStats: make([]tracefile.BufferStats, 1), Tracepipe: &tracefile.TracepipeStats{SinkPacketsWritten: uint64(n + 1), SinkPacketsDropped: dropped}}
	add(tracefile.AppendTraceStatsPacket(nil, &ts, 0, 1000))
	return data, packets, nbytes
}

// A merged trace of two machines: stats reports each machine by its
// machine_id, hostname and machine id, judges the set, and with
// --fail-on-loss names the machine and the batches it lacks.
func TestStatsMergedFileNamesMachines(t *testing.T) {
	dir := t.TempDir()
	store, err := remote.OpenStore(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	alpha := remote.Identity{Machine: 0xa1, Session: [16]byte{1}, Hostname: "alpha"}
	beta := remote.Identity{Machine: 0xb2, Session: [16]byte{2}, Hostname: "beta"}
	for _, step := range []struct {
		id  remote.Identity
		seq uint64
	}{{alpha, 1}, {beta, 1}, {alpha, 2}, {beta, 4}} { // beta's 2 and 3 never arrive
		st, err := store.Stream(step.id)
		if err != nil {
			t.Fatal(err)
		}
		d, n, b := senderBatch(10, 0)
		if _, err := st.Append(step.seq, d, n, b); err != nil {
			t.Fatal(err)
		}
		st.Release()
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, remote.MergedName)
	out, _, code := runCLI(t, "stats", merged)
	if code != exitOK {
		t.Fatalf("stats: exit %d", code)
	}
	for _, want := range []string{
		"machine_id 1: alpha (machine 00000000000000a1)",
		"machine_id 2: beta (machine 00000000000000b2)",
		"set of 2 machine(s): DATA LOSS on machine_id 2: beta",
		"MISSING batches 2-3",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stats does not say %q:\n%s", want, out)
		}
	}
	_, errOut, code := runCLI(t, "stats", "--fail-on-loss", merged)
	if code != exitDataLoss || !strings.Contains(errOut, "machine_id 2: beta") || !strings.Contains(errOut, "batches 2-3") || strings.Contains(errOut, "alpha") {
		t.Fatalf("stats --fail-on-loss: exit %d, %s", code, errOut)
	}
	out, _, _ = runCLI(t, "stats", "--json", merged)
	if !strings.Contains(out, `"counter":"serve.batches_missing","severity":"data_loss","value":2,"lost":true,"machine_id":2`) ||
		!strings.Contains(out, `"counter":"serve.batches_missing","severity":"data_loss","value":0,"lost":false,"machine_id":1`) {
		t.Errorf("stats --json does not list each machine's counters:\n%s", out)
	}
	out, _, _ = runCLI(t, "stats", "--all", merged)
	if !strings.Contains(out, "of machine_id 1: alpha") || !strings.Contains(out, "of machine_id 2: beta") {
		t.Errorf("stats --all does not name the machine of each TraceStats:\n%s", out)
	}
}

// In a received trace, serve's account equals the packets in the file,
// while the sender's sink_packets_written is labelled as the sender's.
func TestStatsReceivedFileCountsMatch(t *testing.T) {
	dir := t.TempDir()
	store, err := remote.OpenStore(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	id := remote.Identity{Machine: 0xc3, Session: [16]byte{3}, Hostname: "gamma"}
	st, err := store.Stream(id)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		d, n, b := senderBatch(20, 0)
		if _, err := st.Append(seq, d, n, b); err != nil {
			t.Fatal(err)
		}
	}
	st.Release()
	store.Close()
	name := store.FileName(id)
	pkts := tracetest.ReadAll(t, name)
	out, errOut, code := runCLI(t, "stats", "--fail-on-loss", name)
	if code != exitOK {
		t.Fatalf("stats --fail-on-loss on a received trace without loss: exit %d\n%s%s", code, out, errOut)
	}
	want := "serve stored " + itoa(len(pkts)) + " packets in 3 batches (this machine's packets in the file: " + itoa(len(pkts)) + ")"
	if !strings.Contains(out, want) || !strings.Contains(out, "sink_* counters are the sender's") {
		t.Errorf("stats does not say %q:\n%s", want, out)
	}
}
