//go:build smbsched

package smb

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
)

// The starvation loss of TestServiceSIGKILLRandomMomentsRotating, forced.
// Freeing a chunk zeroes its header; acquiring it again stores chunk_id,
// then the writer_id/packets word. A scrape that loads chunk_id first can
// load the zero a free chunk holds, be preempted (the busy machine), and
// then load the packets word the writer has meanwhile published with two
// finished packets in it: it hands out the writer's new chunk under chunk
// id 0. If the writer's real chunk 0 is still unread in the trace buffer,
// that record is rewritten with the new chunk's packets (the reader skips
// chunk 0's, a gap, then meets the new chunk's twice); if it was read, the
// copy is discarded as stale (chunks_discarded). Perfetto's scrape loads
// the packets word first (acquire): once it counts two fragments, the ids
// stored before it are visible.
//
// Here chunk 0's record is still unread (and, scraped once while being
// written, reserves a whole chunk) when the writer takes page 0 again for
// chunk 2, just before the scrape loads page 0's bitmap, and writes three
// bigger packets right after the scrape's first load of that chunk's
// header. Without the fix the reader returns packet 5 first: 0..4 lost,
// uncounted.
func TestScrapeTornHeaderOfReusedChunk(t *testing.T) {
	shm, err := NewHeapSMB(2*4096, 4096)
	if err != nil {
		t.Fatal(err)
	}
	buf, err := buffer.New(1<<20, buffer.RingBuffer)
	if err != nil {
		t.Fatal(err)
	}
	svc := &interleaveService{t: t, reader: NewReader(shm), buf: buf, next: map[uint16]uint64{}}
	arb, err := NewArbiter(shm, ArbiterOptions{OnCommit: func(cd *CommitData) {
		b := cd.AppendMarshal(nil)
		svc.mu.Lock()
		svc.queue = append(svc.queue, b)
		svc.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := arb.NewTraceWriter(1, Stall)
	if err != nil {
		t.Fatal(err)
	}
	write := func(idx uint64, pad int) {
		outer, inner := interleavePacket(idx, pad)
		if err := w.WritePacket(protowire.AppendBytes(protowire.AppendTag(outer, 3, protowire.BytesType), inner)); err != nil {
			t.Error(err)
		}
	}
	// Chunk 0 (page 0): packets 0..2 when a scrape copies it (incomplete:
	// packets 0 and 1), then packet 3; committed, copied again (in place:
	// nothing of it was read), not read yet.
	write(0, 20)
	write(1, 20)
	write(2, 20)
	svc.scrape()
	write(3, 20)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// Chunk 1 (page 1): packet 4, Complete, its commit not taken yet.
	write(4, 20)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if !svc.commitOne() {
		t.Fatal("no commit for chunk 0")
	}

	acquired := make(chan struct{}) // the writer took page 0 again
	resume := make(chan struct{})   // the scrape lets it write on
	wrote := make(chan struct{})    // it wrote packets 2..4
	var writerParked, resumed bool
	scrapePages := 0
	schedHook = func(s site) {
		switch s {
		case siteAcquired: // the writer's goroutine
			if !writerParked {
				writerParked = true
				close(acquired)
				<-resume
			}
		case siteScrapeState:
			scrapePages++
		case siteScrapeChunkID, siteScrapeHeader: // the service's goroutine
			if scrapePages == 1 && !resumed { // its first header load of page 0
				resumed = true
				close(resume)
				<-wrote
			}
		}
	}
	defer func() { schedHook = nil }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		write(5, 400) // chunk 2 takes page 0, then parks in siteAcquired
		write(6, 400)
		write(7, 400)
		close(wrote)
	}()
	<-acquired
	svc.scrape()
	<-done
	schedHook = nil

	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	for svc.commitOne() {
	}
	svc.scrape()
	svc.readPass()
	if svc.failure != "" {
		t.Fatal(svc.failure)
	}
	if got := svc.next[w.ID()]; got != 8 {
		t.Fatalf("%d of 8 packets read back", got)
	}
	st := buf.Stats()
	if st.ChunksDiscarded != 0 || st.AbiViolations != 0 {
		t.Fatalf("buffer counted chunks_discarded %d, abi_violations %d", st.ChunksDiscarded, st.AbiViolations)
	}
}
