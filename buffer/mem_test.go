package buffer

import (
	"runtime"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// A buffer's memory is mapped at New and given back by Close, once.
// (Not parallel: MappedBytes is process-wide.)
func TestCloseUnmapsOnce(t *testing.T) {
	before := MappedBytes()
	b, err := New(1<<20+1, RingBuffer)
	if err != nil {
		t.Fatal(err)
	}
	if got := MappedBytes() - before; got != 1<<20+4096 {
		t.Fatalf("New mapped %d bytes, want the rounded size %d", got, 1<<20+4096)
	}
	newChunk(t, b, 1, 1, 0).AddPacket(100, 'a', 0).Copy()
	if b.Closed() {
		t.Fatal("Closed before Close")
	}
	b.Close()
	b.Close()
	if got := MappedBytes() - before; got != 0 {
		t.Fatalf("after Close %d bytes still mapped", got)
	}
	if !b.Closed() || b.Size() != 1<<20+4096 || b.Stats().ChunksWritten != 1 || b.Policy() != RingBuffer {
		t.Fatalf("after Close: closed %v size %d stats %+v", b.Closed(), b.Size(), b.Stats())
	}
	if b.HasData() {
		t.Fatal("a closed buffer claims data")
	}
}

// Close completes a pending incremental clone first: the clone holds the
// bytes of BeginClone's moment, and never reads unmapped memory.
func TestCloseFinishesPendingClone(t *testing.T) {
	b := scNew(t, 64<<10, RingBuffer)
	for c := byte('a'); c < 'a'+20; c++ {
		newChunk(t, b, 1, 1, uint32(c)).AddPacket(1000, c, 0).Copy()
	}
	ref := b.CloneReadOnly()
	mem := make([]byte, b.Size())
	p, err := b.beginClone(mem, 4096)
	if err != nil {
		t.Fatal(err)
	}
	p.Step(4096)
	if p.Done() {
		t.Fatal("the clone finished in one step; the test needs it pending")
	}
	b.Close()
	if !p.Done() {
		t.Fatal("Close left the clone pending")
	}
	want, got := scDrain(ref), scDrain(p.Clone())
	if len(want) != 20 || len(got) != len(want) {
		t.Fatalf("clone read %d packets, reference %d (want 20)", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("packet %d differs after Close", i)
		}
	}
	// The clone's memory is the caller's: closing it unmaps nothing.
	before := MappedBytes()
	p.Clone().Close()
	if MappedBytes() != before {
		t.Fatal("closing a clone over caller memory changed the mapped total")
	}
}

// A Mem is mapped by NewMem, rounded to pages, zeroed and writable, and
// unmapped by Release once; one dropped without Release is unmapped by
// the collector's cleanup and counted. (Not parallel: the counters are
// process-wide.)
func TestMemMapsAndReleases(t *testing.T) {
	before := MappedMemBytes()
	m, err := NewMem(10000)
	if err != nil {
		t.Fatal(err)
	}
	if got := MappedMemBytes() - before; got != 3*4096 || m.Size() != 3*4096 || len(m.Bytes()) != 3*4096 {
		t.Fatalf("NewMem(10000) mapped %d bytes (Size %d, len %d), want 3 pages", got, m.Size(), len(m.Bytes()))
	}
	b := m.Bytes()
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d is %d, want zeroed memory", i, c)
		}
	}
	b[0], b[len(b)-1] = 1, 2
	m.Release()
	m.Release()
	if got := MappedMemBytes() - before; got != 0 || m.Size() != 0 {
		t.Fatalf("after Release %d bytes still mapped, Size %d", got, m.Size())
	}
	if MappedBytes() < 0 {
		t.Fatal("Mem memory was taken from the rings' count")
	}
	if _, err := NewMem(0); err == nil {
		t.Fatal("NewMem(0) mapped nothing without an error")
	}

	leaked := LeakedMems()
	func() {
		if _, err := NewMem(4096); err != nil {
			t.Fatal(err)
		}
	}()
	testsupport.WaitUntil(t, "the cleanup of a dropped Mem", 20*time.Second, func() bool {
		runtime.GC()
		return LeakedMems() > leaked
	})
	if LeakedMems() != leaked+1 {
		t.Fatalf("%d Mems unmapped by cleanups, want the one dropped", LeakedMems()-leaked)
	}
	if got := MappedMemBytes() - before; got != 0 {
		t.Fatalf("%d bytes still mapped after the cleanup", got)
	}
}
