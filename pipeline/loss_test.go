package pipeline

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

// sequences groups a trace's scripted packets by sequence id: packet
// indices in file order, and the loss flags seen.
func sequences(t *testing.T, pkts []tracetest.Packet) (idx map[uint32][]int, flagged map[uint32][]int) {
	idx, flagged = map[uint32][]int{}, map[uint32][]int{}
	for _, p := range pkts {
		if p.Info.SequenceID < 2 {
			continue
		}
		_, i, _, ok := tracetest.ScriptedID(p.Raw)
		if !ok {
			t.Fatalf("unexpected packet %s", tracefile.DumpPacket(p.Raw))
		}
		idx[p.Info.SequenceID] = append(idx[p.Info.SequenceID], i)
		if p.Info.PreviousPacketDropped != 0 && i > 0 {
			flagged[p.Info.SequenceID] = append(flagged[p.Info.SequenceID], i)
		}
	}
	return idx, flagged
}

// checkSubsequence asserts idx is strictly increasing (per-sequence FIFO,
// no duplicates) and that every gap is flagged on the packet after it.
func checkSubsequence(t *testing.T, seq uint32, idx, flagged []int) (gaps int) {
	t.Helper()
	isFlagged := map[int]bool{}
	for _, i := range flagged {
		isFlagged[i] = true
	}
	for k := 1; k < len(idx); k++ {
		if idx[k] <= idx[k-1] {
			t.Fatalf("sequence %d out of order: %d after %d", seq, idx[k], idx[k-1])
		}
		if idx[k] != idx[k-1]+1 {
			gaps++
			if !isFlagged[idx[k]] {
				t.Errorf("sequence %d: gap %d..%d not flagged with previous_packet_dropped", seq, idx[k-1], idx[k])
			}
		}
	}
	return gaps
}

// A small ring buffer read only at the end keeps the newest data: every
// sequence's packets are a suffix-like subsequence, gaps are flagged, and
// TraceStats counts the overwrites.
func TestServiceRingBufferOverwritesAreCounted(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ring.pftrace")
	res := runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 64, fill_policy: ring_buffer}]
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 1, packets: 2000, sizes: [200, 1500]}
sinks: [{type: file, path: %q}]
`, out)))
	pkts := tracetest.ReadTrace(t, out)
	ts := lastStats(t, pkts)
	bs := ts.BufferStats[0]
	if bs.ChunksOverwritten == 0 || bs.BytesOverwritten == 0 || bs.WriteWrapCount == 0 {
		t.Fatalf("no overwrite counted: %+v", bs)
	}
	idx, flagged := sequences(t, pkts)
	if len(idx) != 1 {
		t.Fatalf("%d sequences", len(idx))
	}
	for seq, ii := range idx {
		checkSubsequence(t, seq, ii, flagged[seq])
		if ii[len(ii)-1] != 1999 {
			t.Errorf("sequence %d: newest packet %d missing (last is %d)", seq, 1999, ii[len(ii)-1])
		}
		if ii[0] == 0 {
			t.Errorf("sequence %d: the oldest packet survived a 64 KiB ring of ~3 MB", seq)
		}
	}
	if res.Stats.BufferStats[0].ChunksOverwritten != bs.ChunksOverwritten {
		t.Errorf("Result stats differ from the file's")
	}
}

// A discard buffer keeps the oldest data and counts what it refused.
func TestServiceDiscardPolicyCountsDiscards(t *testing.T) {
	out := filepath.Join(t.TempDir(), "discard.pftrace")
	runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 64, fill_policy: discard}]
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 1, packets: 1000, sizes: [500]}
sinks: [{type: file, path: %q}]
`, out)))
	pkts := tracetest.ReadTrace(t, out)
	bs := lastStats(t, pkts).BufferStats[0]
	if bs.ChunksDiscarded == 0 || bs.ChunksOverwritten != 0 {
		t.Fatalf("discard stats %+v", bs)
	}
	idx, _ := sequences(t, pkts)
	for seq, ii := range idx {
		for k, i := range ii {
			if i != k {
				t.Fatalf("sequence %d: discard must keep a prefix; packet %d at position %d", seq, i, k)
			}
		}
		if len(ii) == 0 || len(ii) >= 1000 {
			t.Fatalf("sequence %d kept %d packets", seq, len(ii))
		}
	}
}

// A data source that writes more than its SMB holds before the service
// can drain it (inside Start) loses packets to the drop policy: the loss
// is counted and flagged on the next packet of the sequence.
func TestServiceProducerDropsAreCounted(t *testing.T) {
	// 1 MB written in a tight loop into a 16 KiB SMB: the writer outruns
	// the service's copying by far (with 100 KB, about 3 runs in 200 had
	// the service keep up, and nothing was dropped to count).
	const written = 1000
	out := filepath.Join(t.TempDir(), "drops.pftrace")
	res := runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`
buffers: [{size_kb: 4096}]
producers: {smb_size_kb: 16, smb_page_size_kb: 4}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: drop
    config: {writers: 1, packets: %d, sizes: [1000], in_start: true}
sinks: [{type: file, path: %q}]
`, written, out)))
	pkts := tracetest.ReadTrace(t, out)
	ts := lastStats(t, pkts)
	if ts.Tracepipe == nil || ts.Tracepipe.ProducerPacketsDropped == 0 {
		t.Fatalf("no producer drop counted: %+v", ts.Tracepipe)
	}
	idx, flagged := sequences(t, pkts)
	var kept int
	for seq, ii := range idx {
		kept += len(ii)
		if gaps := checkSubsequence(t, seq, ii, flagged[seq]); gaps == 0 && ii[len(ii)-1] == written-1 {
			t.Errorf("sequence %d has no gap although packets were dropped", seq)
		}
	}
	if dropped := ts.Tracepipe.ProducerPacketsDropped; uint64(kept)+dropped != written {
		t.Errorf("kept %d + dropped %d != %d written", kept, dropped, written)
	}
	rows := tracefile.LossReport(res.Stats)
	if !tracefile.HasDataLoss(rows) {
		t.Error("loss report shows no data loss")
	}
}
