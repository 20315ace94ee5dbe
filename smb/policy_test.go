package smb

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// collector keeps every delivered CommitData (marshalled) for later.
type collector struct{ recs [][]byte }

func (c *collector) onCommit(cd *CommitData) { c.recs = append(c.recs, cd.AppendMarshal(nil)) }

func (c *collector) drain(t *testing.T, r *Reader, ra *reassembler) {
	t.Helper()
	var cd CommitData
	for _, rec := range c.recs {
		if err := cd.Unmarshal(rec); err != nil {
			t.Fatal(err)
		}
		r.ReadCommit(&cd, ra.addChunk, ra.applyPatch)
	}
	c.recs = nil
}

func filled(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }

func TestDropPolicySentinelAndLossMarker(t *testing.T) {
	s, _ := NewHeapSMB(4*4096, 4096) // four Div1 chunks
	var col collector
	arb, _ := NewArbiter(s, ArbiterOptions{Commit: CommitBatched, OnCommit: col.onCommit})
	w, _ := arb.NewTraceWriter(1, Drop)
	p0, p1, p2, p3 := filled(100, 'a'), filled(20000, 'b'), filled(50, 'c'), filled(60, 'd')
	for _, p := range [][]byte{p0, p1, p2} {
		if err := w.WritePacket(p); err != nil {
			t.Fatalf("Drop policy must not report an error: %v", err)
		}
	}
	if got := w.Stats().PacketsDropped; got != 2 {
		t.Fatalf("PacketsDropped = %d, want 2 (the big packet and the one after)", got)
	}
	// The fourth chunk's only fragment carries the drop sentinel.
	h, _ := s.ReadChunkHeader(3, 0)
	if h.ChunkID != 3 || h.Flags != FlagFirstPacketContinuesFromPrevChunk || h.Count != 1 {
		t.Fatalf("aborted chunk header %+v", h)
	}
	if got := s.Bytes()[3*4096+16 : 3*4096+20]; !bytes.Equal(got, []byte{0xff, 0xff, 0xff, 0x7f}) {
		t.Fatalf("sentinel bytes % x", got)
	}
	r := NewReader(s)
	ra := newReassembler()
	arb.FlushPendingCommits()
	col.drain(t, r, ra) // the service frees all four chunks
	if err := w.WritePacket(p3); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	col.drain(t, r, ra)
	if r.Stats().WriterAborts != 1 || r.Stats().TotalRejected() != 0 {
		t.Errorf("reader stats %+v", r.Stats())
	}
	got, err := ra.packets(w.ID())
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{append([]byte{0xb8, 0x05, 0x01}, p0...), append([]byte{0xd0, 0x02, 0x81, 0x02}, p3...)}
	if len(got.packets) != 2 || !bytes.Equal(got.packets[0], want[0]) || !bytes.Equal(got.packets[1], want[1]) {
		t.Fatalf("packets %x\nwant %x", got.packets, want)
	}
	if got.lost == 0 {
		t.Error("the aborted packet was not seen as lost")
	}
	if ra.sentinelErr != nil {
		t.Error(ra.sentinelErr)
	}
}

// TestStallPolicyTimesOutWithError runs on synctest's fake clock, so the
// default 10 s stall timeout costs nothing and the time the writer waited
// is exact: its timeout, plus at most one 1 ms backoff step.
func TestStallPolicyTimesOutWithError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := NewHeapSMB(2*4096, 4096)
		var col collector
		arb, _ := NewArbiter(s, ArbiterOptions{OnCommit: col.onCommit, StallTimeout: 10 * time.Second})
		w, _ := arb.NewTraceWriter(1, Stall)
		t0 := time.Now()
		err := w.WritePacket(filled(10000, 'x'))
		if d := time.Since(t0); d < 10*time.Second || d > 10*time.Second+time.Millisecond {
			t.Fatalf("the stalled write gave up after %v, want its 10s timeout", d)
		}
		if !errors.Is(err, ErrStallTimeout) || !strings.Contains(err.Error(), "waiting for a free chunk") {
			t.Fatalf("err = %v", err)
		}
		// The writer recovers once the service frees chunks.
		r := NewReader(s)
		ra := newReassembler()
		col.drain(t, r, ra)
		if err := w.WritePacket(filled(10, 'y')); err != nil {
			t.Fatal(err)
		}
		w.Flush()
		col.drain(t, r, ra)
		got, _ := ra.packets(w.ID())
		if len(got.packets) != 1 || !bytes.Equal(got.packets[0], append([]byte{0xd0, 0x02, 0x81, 0x02}, filled(10, 'y')...)) {
			t.Fatalf("packets after stall %x", got.packets)
		}
	})
}

// TestStallPolicyWaitsForService runs on synctest's fake clock: the slow
// service and the writer's backoff interleave the same way every run.
func TestStallPolicyWaitsForService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := NewHeapSMB(2*4096, 4096)
		recs := make(chan []byte, 64)
		arb, _ := NewArbiter(s, ArbiterOptions{OnCommit: func(cd *CommitData) { recs <- cd.AppendMarshal(nil) }})
		w, _ := arb.NewTraceWriter(1, Stall)
		ra := newReassembler()
		done := make(chan struct{})
		go func() {
			r := NewReader(s)
			var cd CommitData
			for rec := range recs {
				time.Sleep(time.Millisecond) // a slow service
				if err := cd.Unmarshal(rec); err != nil {
					t.Error(err)
				}
				r.ReadCommit(&cd, ra.addChunk, ra.applyPatch)
			}
			close(done)
		}()
		big := filled(50000, 'z') // 13 chunks through a 2-chunk SMB
		if err := w.WritePacket(big); err != nil {
			t.Fatal(err)
		}
		w.Close()
		close(recs)
		<-done
		got, _ := ra.packets(1)
		if len(got.packets) != 1 || !bytes.Equal(got.packets[0], append([]byte{0xb8, 0x05, 0x01}, big...)) || got.lost != 0 {
			t.Fatalf("got %d packets, lost %d", len(got.packets), got.lost)
		}
	})
}

func TestWriterIDsRoundRobin(t *testing.T) {
	s, _ := NewHeapSMB(4096, 4096)
	arb, _ := NewArbiter(s, ArbiterOptions{OnCommit: func(*CommitData) {}})
	a, _ := arb.NewTraceWriter(1, Drop)
	b, _ := arb.NewTraceWriter(1, Drop)
	a.Close()
	c, _ := arb.NewTraceWriter(1, Drop)
	if a.ID() != 1 || b.ID() != 2 || c.ID() != 3 {
		t.Fatalf("ids %d %d %d, want 1 2 3 (round robin, no reuse of the lowest)", a.ID(), b.ID(), c.ID())
	}
	if err := a.WritePacket([]byte{1}); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("write after close: %v", err)
	}
	n := 3
	for ; n < MaxWriterID; n++ {
		if _, err := arb.NewTraceWriter(1, Drop); err != nil {
			t.Fatalf("writer %d: %v", n+1, err)
		}
	}
	// 32767 ids with id 1 free again: the allocator wraps to it.
	w, err := arb.NewTraceWriter(1, Drop)
	if err != nil || w.ID() != 1 {
		t.Fatalf("wrap-around: %v %v", w, err)
	}
	if _, err := arb.NewTraceWriter(1, Drop); err == nil {
		t.Fatal("id exhaustion not reported")
	}
}

func TestPacketLimitPerChunk(t *testing.T) {
	s, _ := NewHeapSMB(16*65536, 65536)
	var col collector
	arb, _ := NewArbiter(s, ArbiterOptions{Commit: CommitBatched, OnCommit: col.onCommit})
	w, _ := arb.NewTraceWriter(1, Drop)
	w.WritePacket([]byte{1, 2}) // first packet (with field 87) via the slow path
	for range 1500 {
		w.WritePacket([]byte{8, 1})
	}
	h, _ := s.ReadChunkHeader(0, 0)
	if h.Count != MaxPacketsPerChunk+1 {
		t.Fatalf("first chunk count %d, want 1022 packets + inflated", h.Count)
	}
	h1, _ := s.ReadChunkHeader(1, 0)
	if h1.ChunkID != 1 || h1.Count != 1501-MaxPacketsPerChunk+1 {
		t.Fatalf("second chunk %+v", h1)
	}
	w.Flush()
	r, ra := NewReader(s), newReassembler()
	col.drain(t, r, ra)
	got, _ := ra.packets(1)
	if len(got.packets) != 1501 {
		t.Fatalf("%d packets", len(got.packets))
	}
}

func TestNoPacketStartsInLast12Bytes(t *testing.T) {
	s, _ := NewHeapSMB(4*4096, 4096)
	var col collector
	arb, _ := NewArbiter(s, ArbiterOptions{Commit: CommitBatched, OnCommit: col.onCommit})
	w, _ := arb.NewTraceWriter(1, Drop)
	// First packet: 3 + n bytes with a 4-byte header; leave exactly 11 bytes.
	n := 4080 - 4 - 3 - 11
	w.WritePacket(filled(n, 'q'))
	w.WritePacket([]byte{1})
	h0, _ := s.ReadChunkHeader(0, 0)
	h1, _ := s.ReadChunkHeader(1, 0)
	if h0.Count != 2 || h0.Flags != 0 || h1.ChunkID != 1 || h1.Count != 2 {
		t.Fatalf("headers %+v %+v: the second packet must open a new chunk", h0, h1)
	}
	// The returned chunk ends with the zero-length padding fragment.
	if b := s.Bytes()[8+8+4+3+n]; b != 0 {
		t.Fatalf("padding byte %#x", b)
	}
}

// TraceWriter must satisfy plugins.PacketWriter (matched by method set;
// smb does not import plugins).
var _ interface {
	WritePacket([]byte) error
	Flush() error
} = (*TraceWriter)(nil)

// TestStalledWriterCommitsBeforeSleeping: with CommitBatched, a writer
// that runs out of chunks still holds commits the service has not heard
// of (fewer than half the SMB). It must hand them over before it sleeps:
// on synctest's clock the second delivery happens at the very instant the
// writer stalls, not one back-off sleep later.
func TestStalledWriterCommitsBeforeSleeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := NewHeapSMB(8*4096, 4096) // eight Div1 chunks: a commit goes out at four pending
		t0 := time.Now()
		var at []time.Duration
		recs := make(chan []byte, 64)
		arb, _ := NewArbiter(s, ArbiterOptions{Commit: CommitBatched, OnCommit: func(cd *CommitData) {
			at = append(at, time.Since(t0))
			recs <- cd.AppendMarshal(nil)
		}})
		w, _ := arb.NewTraceWriter(1, Stall)
		ra := newReassembler()
		done := make(chan struct{})
		go func() { // a service that frees chunks as soon as it hears of them
			r := NewReader(s)
			var cd CommitData
			for rec := range recs {
				if err := cd.Unmarshal(rec); err != nil {
					t.Error(err)
				}
				r.ReadCommit(&cd, ra.addChunk, ra.applyPatch)
			}
			close(done)
		}()
		// Nine chunks of data: the ninth needs a chunk the service frees
		// only once it gets the second commit (chunks 5 to 8).
		big := filled(9*4000, 'q')
		if err := w.WritePacket(big); err != nil {
			t.Fatal(err)
		}
		w.Close()
		close(recs)
		<-done
		if len(at) < 2 || at[0] != 0 || at[1] != 0 {
			t.Fatalf("commits delivered at %v: the stalled writer slept before handing over what it had written", at)
		}
		got, _ := ra.packets(1)
		if len(got.packets) != 1 || got.lost != 0 {
			t.Fatalf("got %d packets, lost %d", len(got.packets), got.lost)
		}
	})
}

// CommitPosted asks its owner for a flush once per batch, when the first
// chunk is returned into an empty request; the chunks returned before the
// owner flushes travel in one CommitData, in the order they were returned.
func TestCommitPostedBatchesUntilTheOwnerFlushes(t *testing.T) {
	if _, err := NewArbiter(nil, ArbiterOptions{Commit: CommitPosted, OnCommit: func(*CommitData) {}}); err == nil {
		t.Fatal("CommitPosted without OnPending was accepted")
	}
	s, _ := NewHeapSMB(16*4096, 4096) // sixteen Div1 chunks
	var col collector
	posts := 0
	arb, err := NewArbiter(s, ArbiterOptions{Commit: CommitPosted, OnCommit: col.onCommit, OnPending: func() { posts++ }})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := arb.NewTraceWriter(1, Drop)
	// 12000 bytes of packets fill and return two chunks of 4 KiB (the
	// packets continue across chunk ends) and write into a third.
	for range 4 {
		if err := w.WritePacket(filled(3000, 'p')); err != nil {
			t.Fatal(err)
		}
	}
	if posts != 1 {
		t.Fatalf("OnPending called %d times for one batch, want 1", posts)
	}
	if len(col.recs) != 0 {
		t.Fatalf("%d commits delivered before the owner flushed", len(col.recs))
	}
	arb.FlushPendingCommits()
	if len(col.recs) != 1 {
		t.Fatalf("%d commits after the flush, want 1", len(col.recs))
	}
	var cd CommitData
	if err := cd.Unmarshal(col.recs[0]); err != nil {
		t.Fatal(err)
	}
	if n := len(cd.ChunksToMove); n != 2 {
		t.Fatalf("the commit moves %d chunks, want the 2 returned", n)
	}
	for i, m := range cd.ChunksToMove {
		if m.Page != uint32(i) {
			t.Fatalf("move %d is page %d, want %d (return order)", i, m.Page, i)
		}
	}
	// The next returned chunk starts a new batch: a new post.
	if err := w.WritePacket(filled(3000, 'q')); err != nil {
		t.Fatal(err)
	}
	if posts != 2 {
		t.Fatalf("OnPending called %d times after the second batch began, want 2", posts)
	}
}
