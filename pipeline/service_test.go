package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"github.com/tracepipe/tracepipe/plugins/builtin"
	"github.com/tracepipe/tracepipe/tracefile"
)

// lastStats returns the last TraceStats in the trace.
func lastStats(t *testing.T, pkts []tracetest.Packet) tracefile.TraceStats {
	t.Helper()
	for i := len(pkts) - 1; i >= 0; i-- {
		ts, ok, err := tracefile.DecodeTraceStatsPacket(pkts[i].Raw)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return ts
		}
	}
	t.Fatal("no TraceStats packet")
	return tracefile.TraceStats{}
}

func runSession(t *testing.T, cfg *config.Config) *Result {
	t.Helper()
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Files) == 0 {
		t.Fatal("no file written")
	}
	return res
}

func TestServiceStreamsExactPacketsWithTrustedFields(t *testing.T) {
	out := filepath.Join(t.TempDir(), "trace.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall # exactness test: back-pressure instead of SMB drops
    config: {writers: 3, packets: 400, sizes: [10, 300, 5000, 70, 9000, 1]}
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 1, packets: 50, sizes: [40], spoof_every: 10}
sinks: [{type: file, path: %q}]
`, out))
	res := runSession(t, cfg)
	pkts := tracetest.ReadTrace(t, out)

	got := map[uint32][]int{}       // sequence id → packet indices, in file order
	writerOf := map[uint32][2]int{} // sequence id → (first packet's size, writer)
	uid, pid := int32(os.Getuid()), int32(os.Getpid())
	var serviceSeq int
	for _, p := range pkts {
		if p.Info.SequenceID == 1 {
			serviceSeq++
			continue
		}
		if p.Info.SequenceID < 2 {
			t.Fatalf("packet without a trusted sequence id: %+v", p.Info)
		}
		if !p.Info.HasTrustedUID || p.Info.TrustedUID != uid || !p.Info.HasTrustedPID || p.Info.TrustedPID != pid {
			t.Fatalf("trusted fields %+v, want uid %d pid %d", p.Info, uid, pid)
		}
		w, i, body, ok := tracetest.ScriptedID(p.Raw)
		if !ok {
			t.Fatalf("unexpected producer packet %s", tracefile.DumpPacket(p.Raw))
		}
		if _, seen := writerOf[p.Info.SequenceID]; !seen {
			writerOf[p.Info.SequenceID] = [2]int{len(body), w}
		} else if writerOf[p.Info.SequenceID][1] != w {
			t.Fatalf("sequence %d mixes writers %d and %d", p.Info.SequenceID, writerOf[p.Info.SequenceID][1], w)
		}
		want := scriptedPacket(w, i, len(body), false)
		raw := p.Raw
		if i == 0 {
			// The TraceWriter marks a writer's first packet
			// (first_packet_on_sequence = true, field 87).
			raw = bytes.TrimPrefix(raw, []byte{0xb8, 0x05, 0x01})
		}
		if !bytes.HasPrefix(raw, want) {
			t.Fatalf("sequence %d packet %d differs from what the writer wrote:\n got %x\nwant %x", p.Info.SequenceID, i, p.Raw, want)
		}
		// The buffer flags the first packet of a sequence (nothing before
		// it can be vouched for); any later flag is a loss.
		if i > 0 && p.Info.PreviousPacketDropped != 0 {
			t.Fatalf("sequence %d packet %d flagged dropped (%s)", p.Info.SequenceID, i, tracefile.LossReasonString(p.Info.PreviousPacketDropped))
		}
		got[p.Info.SequenceID] = append(got[p.Info.SequenceID], i)
	}
	if len(got) != 4 {
		t.Fatalf("%d producer sequences, want 4", len(got))
	}
	for seq, idx := range got {
		var want []int
		if writerOf[seq][0] == 40 { // the spoofing source: every 10th packet rejected
			for i := 0; i < 50; i++ {
				if i%10 != 9 {
					want = append(want, i)
				}
			}
		} else {
			for i := 0; i < 400; i++ {
				want = append(want, i)
			}
		}
		if fmt.Sprint(idx) != fmt.Sprint(want) {
			t.Errorf("sequence %d holds packets %v\nwant %v", seq, idx, want)
		}
	}
	ts := lastStats(t, pkts)
	if ts.InvalidPackets != 5 {
		t.Errorf("invalid_packets = %d, want 5 (the spoofing packets)", ts.InvalidPackets)
	}
	if len(ts.BufferStats) != 1 || ts.BufferStats[0].ChunksOverwritten != 0 || ts.BufferStats[0].ChunksDiscarded != 0 {
		t.Errorf("buffer stats %+v", ts.BufferStats)
	}
	if ts.FinalFlushOutcome != tracefile.FlushOutcomeSucceeded {
		t.Errorf("final_flush_outcome = %d", ts.FinalFlushOutcome)
	}
	if ts.Tracepipe == nil || ts.Tracepipe.ProducerPacketsDropped != 0 {
		t.Errorf("tracepipe stats %+v", ts.Tracepipe)
	}
	if serviceSeq < 5 {
		t.Errorf("%d service packets", serviceSeq)
	}
	if res.Packets != uint64(len(pkts)) {
		t.Errorf("result says %d packets written, file holds %d", res.Packets, len(pkts))
	}
}

// The synthetic source's stream arrives byte for byte: each sequence holds
// exactly the packets its writer's generator produces, in order, followed
// by the trusted fields the service stamps.
func TestServiceSyntheticStreamExact(t *testing.T) {
	out := filepath.Join(t.TempDir(), "synthetic.pftrace")
	srcCfg := map[string]any{"writers": 3, "rate": 0, "packet_size": 300, "max_packets": 700,
		"names": 50, "counter_every": 5, "deterministic_timestamps": true}
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 8192}]
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: 3, rate: 0, packet_size: 300, max_packets: 700, names: 50, counter_every: 5, deterministic_timestamps: true}
sinks: [{type: file, path: %q}]
`, out))
	runSession(t, cfg)
	sc, err := builtin.ParseSyntheticConfig(srcCfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint32][][]byte{}
	var order []uint32
	uid, pid := int32(os.Getuid()), int32(os.Getpid())
	for _, p := range tracetest.ReadTrace(t, out) {
		if p.Info.SequenceID < 2 {
			continue
		}
		if p.Info.TrustedUID != uid || p.Info.TrustedPID != pid {
			t.Fatalf("trusted fields %+v", p.Info)
		}
		if _, ok := got[p.Info.SequenceID]; !ok {
			order = append(order, p.Info.SequenceID)
		}
		got[p.Info.SequenceID] = append(got[p.Info.SequenceID], p.Raw)
	}
	if len(got) != 3 {
		t.Fatalf("%d sequences, want 3", len(got))
	}
	// The instance's deterministic timestamps start at its boot time of
	// creation: every writer's first packet carries that base.
	first, err := tracefile.DecodePacket(got[order[0]][0])
	if err != nil || !first.HasTimestamp {
		t.Fatalf("first packet: %+v %v", first, err)
	}
	sc.TimestampBase = first.Timestamp
	// Expected stream of each writer: the generator's packets up to and
	// including the 700th TrackEvent.
	var expected [][][]byte
	for w := 0; w < 3; w++ {
		g := builtin.NewSyntheticGenerator(sc, w)
		var pkts [][]byte
		for !g.Done() {
			pkts = append(pkts, g.Next(nil))
		}
		expected = append(expected, pkts)
	}
	matched := map[int]bool{}
	for _, seq := range order {
		pkts := got[seq]
		w := -1
		for cand := range expected {
			first := append([]byte{0xb8, 0x05, 0x01}, expected[cand][0]...) // the TraceWriter's first_packet_on_sequence
			if bytes.HasPrefix(pkts[0], first) {
				w = cand
			}
		}
		if w < 0 || matched[w] {
			t.Fatalf("sequence %d: first packet matches no writer", seq)
		}
		matched[w] = true
		if len(pkts) != len(expected[w]) {
			t.Fatalf("sequence %d (writer %d): %d packets, want %d", seq, w, len(pkts), len(expected[w]))
		}
		for i, p := range pkts {
			want := expected[w][i]
			if i == 0 {
				want = append([]byte{0xb8, 0x05, 0x01}, want...)
			}
			if !bytes.HasPrefix(p, want) {
				t.Fatalf("sequence %d packet %d differs", seq, i)
			}
			info, _ := tracefile.DecodePacket(p[len(want):])
			if info.SequenceID != seq || (i > 0 && info.PreviousPacketDropped != 0) {
				t.Fatalf("sequence %d packet %d: stamped suffix %+v", seq, i, info)
			}
		}
	}
}
