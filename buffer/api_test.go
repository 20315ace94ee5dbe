package buffer

import (
	"testing"
)

func TestNewSizes(t *testing.T) {
	for _, c := range []struct {
		in, want int
	}{{1, 4096}, {1000, 4096}, {4096, 4096}, {4097, 8192}, {5000, 8192}} {
		b, err := New(c.in, Discard)
		if err != nil {
			t.Fatal(err)
		}
		if b.Size() != c.want || b.Stats().BufferSize != uint64(c.want) || b.Policy() != Discard {
			t.Errorf("New(%d): size %d, stats %d, policy %v", c.in, b.Size(), b.Stats().BufferSize, b.Policy())
		}
		if b.HasData() || b.UsedSize() != 0 {
			t.Errorf("New(%d) has data", c.in)
		}
	}
	for _, bad := range []int{0, -1, 1<<32 + 1} {
		if _, err := New(bad, RingBuffer); err == nil {
			t.Errorf("New(%d) succeeded", bad)
		}
	}
	if _, err := New(4096, Policy(7)); err == nil {
		t.Error("New with policy 7 succeeded")
	}
}

func TestStatsFields(t *testing.T) {
	s := Stats{BufferSize: 12, BytesWritten: 1, BytesOverwritten: 13, BytesRead: 14,
		PaddingBytesWritten: 15, PaddingBytesCleared: 16, ChunksWritten: 2, ChunksRewritten: 10,
		ChunksRelocated: 20, ChunksOverwritten: 3, ChunksDiscarded: 18, ChunksRead: 17,
		ChunksCommittedOutOfOrder: 11, WriteWrapCount: 4, PatchesSucceeded: 5, PatchesFailed: 6,
		ReadaheadsSucceeded: 7, ReadaheadsFailed: 8, AbiViolations: 9, TraceWriterPacketLoss: 19}
	fs := s.Fields()
	if len(fs) != 20 {
		t.Fatalf("%d fields", len(fs))
	}
	names := map[string]bool{}
	for i, f := range fs {
		if f.Number != i+1 || f.Value != uint64(f.Number) {
			t.Errorf("field %d: %+v", i, f)
		}
		names[f.Name] = true
	}
	if !names["chunks_committed_out_of_order"] || !names["trace_writer_packet_loss"] || len(names) != 20 {
		t.Errorf("names %v", names)
	}
}

func TestWriterStatsHistogram(t *testing.T) {
	b := mustNew(t, 1<<16, RingBuffer)
	sizes := []int{8, 9, 32, 100, 4000}
	for i, n := range sizes {
		newChunk(t, b, 2, 3, uint32(i)).AddPacket(n, 'a', 0).Copy()
	}
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', 0).Copy()
	ws := b.WriterStats()
	if len(ws) != 2 || ws[0].ProducerID != 1 || ws[1].ProducerID != 2 || ws[1].WriterID != 3 {
		t.Fatalf("writer stats %+v", ws)
	}
	want := [NumHistogramBuckets]uint64{1, 2, 1, 0, 0, 0, 1}
	if ws[1].Counts != want {
		t.Errorf("counts %v, want %v", ws[1].Counts, want)
	}
	if ws[1].Sums[1] != 9+32 || ws[1].Sums[6] != 4000 {
		t.Errorf("sums %v", ws[1].Sums)
	}
	if len(b.CloneReadOnly().WriterStats()) != 0 {
		t.Error("clone has writer stats")
	}
}

// TestCloneIsReadOnly: writes and patches on a clone are refused and
// counted, and the clone's reads leave the source untouched.
func TestCloneIsReadOnly(t *testing.T) {
	b := mustNew(t, 4096, RingBuffer)
	newChunk(t, b, 1, 1, 0).AddPacket(20, 'a', flagNeedsPatching).Copy()
	newChunk(t, b, 1, 1, 1).AddPacket(20, 'b', 0).Copy()
	c := b.CloneReadOnly()
	if !c.IsReadOnly() || b.IsReadOnly() || c.UsedSize() != b.UsedSize() {
		t.Fatal("clone flags/size")
	}
	newChunk(t, c, 1, 1, 2).AddPacket(20, 'c', 0).Copy()
	if c.TryPatchChunkContents(1, 1, 0, []Patch{{Offset: 1}}, false) {
		t.Fatal("patch on clone succeeded")
	}
	st := c.Stats()
	if st.ChunksDiscarded != 1 || st.PatchesFailed != 1 || st.ChunksWritten != 2 {
		t.Fatalf("clone stats %+v", st)
	}
	if got := readPackets(c); len(got) != 2 || got[1].Data != fakePayload(20, 'b') {
		t.Fatalf("clone read %+v", got)
	}
	if got := readPackets(b); len(got) != 2 {
		t.Fatalf("source read %+v after clone read", got)
	}
	if b.Stats().ChunksRead != 2 || c.Stats().ChunksRead != 2 {
		t.Fatalf("chunks read: source %d, clone %d", b.Stats().ChunksRead, c.Stats().ChunksRead)
	}
}

// TestWriteDuringReadPass: a copy between reads of one pass must not
// corrupt the walk; the pass continues from the oldest record.
func TestWriteDuringReadPass(t *testing.T) {
	b := mustNew(t, 4096, RingBuffer)
	for i := 0; i < 3; i++ {
		newChunk(t, b, 1, 1, uint32(i)).AddPacket(1000, 'a'+byte(i), 0).Copy()
	}
	b.BeginRead()
	if p, ok := readOne(b); !ok || p.Data != fakePayload(1000, 'a') {
		t.Fatalf("first read %+v", p)
	}
	// Wraps and overwrites the chunk under the read cursor.
	newChunk(t, b, 1, 1, 3).AddPacket(2000, 'd', 0).Copy()
	var got []string
	for {
		p, ok := readOne(b)
		if !ok {
			break
		}
		got = append(got, p.Data[:1])
	}
	if len(got) != 2 || got[0] != "c" || got[1] != "d" {
		t.Fatalf("rest of pass %q, want c d", got)
	}
}

// TestEmptySequenceGC: once more than 1024+128 sequences are empty at the
// end of a write, the oldest-emptied are deleted down to 1024; the others
// keep their last consumed chunk id for gap detection.
func TestEmptySequenceGC(t *testing.T) {
	b := mustNew(t, 1<<20, RingBuffer)
	const n = 1200
	for w := 1; w <= n; w++ {
		newChunk(t, b, 1, uint16(w), 5).AddPacket(16, 'a', 0).Copy()
		if b.emptySeqs > keepLastEmptySeq+emptySeqSlack {
			t.Fatalf("writer %d: %d empty sequences after a write", w, b.emptySeqs)
		}
		if got := readPackets(b); len(got) != 1 {
			t.Fatalf("writer %d: read %d packets", w, len(got))
		}
	}
	// Writing writer 1154 found 1153 empty sequences and kept the newest
	// 1024 (writers 130..1153); 47 more emptied since.
	if b.emptySeqs != 1071 || len(b.seqs) != 1071 {
		t.Fatalf("%d empty sequences, %d sequences; want 1071", b.emptySeqs, len(b.seqs))
	}
	newChunk(t, b, 1, 129, 7).AddPacket(16, 'b', 0).Copy() // forgotten: no gap
	newChunk(t, b, 1, 130, 7).AddPacket(16, 'c', 0).Copy() // remembered: gap 5 -> 7
	got := readPackets(b)
	if len(got) != 2 || got[0].W != 129 || got[0].Dropped != 0 ||
		got[1].W != 130 || got[1].Dropped != LossPresent|LossReadGap {
		t.Fatalf("got %+v", got)
	}
}

// TestOversizedAndMalformed covers inputs that must be counted, never
// stored past bounds.
func TestOversizedAndMalformed(t *testing.T) {
	b := mustNew(t, 1<<20, RingBuffer)
	big := make([]byte, 70000)
	b.CopyChunkUntrusted(1, ClientIdentity{}, 1, 0, 0, 0, false, big) // capacity > 65535
	if b.Stats().AbiViolations != 1 || b.HasData() {
		t.Fatalf("oversized chunk: %+v", b.Stats())
	}
	b.CopyChunkUntrusted(1, ClientIdentity{}, 1, 1, 3, 0xff, true, []byte{0x05, 1, 2})
	if b.Stats().AbiViolations != 2 || b.Stats().ChunksWritten != 1 {
		t.Fatalf("truncated chunk: %+v", b.Stats())
	}
	if got := readPackets(b); len(got) != 0 {
		t.Fatalf("read %+v", got)
	}
}
