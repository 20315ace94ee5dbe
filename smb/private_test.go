package smb

import (
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// heapObjects is the bytes of live and not yet swept heap objects.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtime.GC()
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// fill writes every byte of s (every page becomes resident).
func fill(s *SMB) {
	b := s.Bytes()
	for i := range b {
		b[i] = byte(i)
	}
}

// A private SMB's bytes are not on the Go heap, where the collector's goal
// would double them; a heap SMB's are (which shows the measure can fail).
func TestPrivateSMBIsOffHeap(t *testing.T) {
	const size = 16 << 20
	for _, c := range []struct {
		mem     backing
		offHeap bool
	}{{private, true}, {onHeap, false}} {
		t.Run(string(c.mem), func(t *testing.T) {
			before := heapObjects()
			s, err := newTestSMB(c.mem, size, 4096)
			if err != nil {
				t.Fatal(err)
			}
			fill(s)
			grew := int64(heapObjects()) - int64(before)
			if s.OnHeap() == c.offHeap {
				t.Errorf("OnHeap() = %v", s.OnHeap())
			}
			if c.offHeap && grew > 1<<20 {
				t.Errorf("the heap grew by %d bytes with a %d-byte private SMB", grew, size)
			}
			if !c.offHeap && grew < size/2 {
				t.Errorf("the heap grew by only %d bytes with a %d-byte heap SMB", grew, size)
			}
			s.Close()
			runtime.KeepAlive(s)
		})
	}
}

// resident counts the pages of b in memory.
func resident(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+4095)/4096)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); errno != 0 {
		t.Fatal("mincore:", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// Close gives a private SMB's pages back at once, but its memory stays
// mapped and writable: an in-process writer that has not stopped yet
// writes on, into zeroed pages, and never faults.
func TestPrivateSMBCloseFreesPagesKeepsRange(t *testing.T) {
	const size = 1 << 20
	s, err := NewPrivateSMB(size, 4096)
	if err != nil {
		t.Fatal(err)
	}
	var commits int
	arb, err := NewArbiter(s, ArbiterOptions{OnCommit: func(*CommitData) { commits++ }})
	if err != nil {
		t.Fatal(err)
	}
	w, err := arb.NewTraceWriter(1, Drop)
	if err != nil {
		t.Fatal(err)
	}
	packet := make([]byte, 1000)
	for range 2000 { // 2 MB through a 1 MiB SMB: every page written
		if err := w.WritePacket(packet); err != nil {
			t.Fatal(err)
		}
	}
	fill(s)
	if n := resident(t, s.Bytes()); n != size/4096 {
		t.Fatalf("%d pages resident after writing all %d", n, size/4096)
	}
	if s.Closed() {
		t.Fatal("Closed before Close")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !s.Closed() {
		t.Error("not Closed after Close")
	}
	if n := resident(t, s.Bytes()); n != 0 {
		t.Errorf("%d pages still resident after Close", n)
	}
	if s.Size() != size || len(s.Bytes()) != size {
		t.Errorf("after Close: Size %d, %d bytes, want the range kept (%d)", s.Size(), len(s.Bytes()), size)
	}
	for i, b := range s.Bytes() {
		if b != 0 {
			t.Fatalf("byte %d is %#x after Close, want the pages zeroed", i, b)
		}
	}
	// The writer goes on as a lagging one would: no fault, no error.
	before := commits
	for range 2000 {
		if err := w.WritePacket(packet); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if commits == before {
		t.Error("the writer committed nothing after Close: it did not write on")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// A private SMB's range is unmapped once nothing reaches it.
func TestPrivateSMBUnmappedWhenUnreachable(t *testing.T) {
	const size = 4 << 20
	base := PrivateMappedBytes()
	func() {
		s, err := NewPrivateSMB(size, 4096)
		if err != nil {
			t.Fatal(err)
		}
		fill(s)
		if got := PrivateMappedBytes(); got < base+size {
			t.Fatalf("PrivateMappedBytes %d with a %d-byte SMB, was %d", got, size, base)
		}
		s.Close()
	}()
	deadline := time.Now().Add(10 * time.Second)
	for PrivateMappedBytes() > base {
		if time.Now().After(deadline) {
			t.Fatalf("PrivateMappedBytes still %d (was %d) 10 s after the SMB was dropped", PrivateMappedBytes(), base)
		}
		runtime.GC()
		runtime.Gosched()
	}
}

func TestPrivateSMBGeometry(t *testing.T) {
	for _, c := range []struct{ size, page int }{{4096, 1000}, {10000, 4096}, {0, 4096}} {
		if _, err := NewPrivateSMB(c.size, c.page); err == nil || !strings.Contains(err.Error(), "smb: ") {
			t.Errorf("NewPrivateSMB(%d, %d): %v, want a geometry error", c.size, c.page, err)
		}
	}
}
