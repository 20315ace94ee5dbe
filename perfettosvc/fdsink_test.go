package perfettosvc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/tracefile"
)

// fdPackets are packets of every size class the sink treats apart (empty,
// copied, given to writev as they are), more of them than one writev
// takes.
func fdPackets() (packets [][]byte, want []byte) {
	sizes := []int{0, 1, gatherCopyMax - 1, gatherCopyMax, gatherCopyMax + 1, 1000, 70000}
	for i := 0; i < 3*iovMax; i++ {
		sizes = append(sizes, 300+i%7, 3)
	}
	for i, n := range sizes {
		p := bytes.Repeat([]byte{byte(i)}, n)
		packets = append(packets, p)
		want = tracefile.AppendRecord(want, p)
	}
	return packets, want
}

// The file holds every packet framed as a Trace record, in order, and the
// counters say so.
func TestFDSinkWritesRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.pftrace")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	s := newFDSink(f)
	packets, want := fdPackets()
	for range 2 {
		if err := s.Write(context.Background(), packets); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, append(want[:len(want):len(want)], want...)) {
		t.Fatalf("file holds %d bytes, want %d (the records twice)", len(got), 2*len(want))
	}
	var n uint64
	for _, p := range packets {
		n += uint64(len(p))
	}
	if st := s.Stats(); st.PacketsWritten != uint64(2*len(packets)) || st.BytesWritten != 2*n || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}

// A descriptor that takes part of a writev at a time (a non-blocking pipe
// read slowly) still receives every byte once, in order.
func TestFDSinkPartialWrites(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 1000) // smaller reads than the pipe holds
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	s := newFDSink(w)
	if !s.raw {
		t.Fatal("a non-blocking pipe is not written raw")
	}
	packets, want := fdPackets()
	if err := s.Write(context.Background(), packets); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(context.Background())
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("pipe carried %d bytes, want %d", len(b), len(want))
	}
}

// A failing write is an error naming the output and a counted loss of
// the batch.
func TestFDSinkWriteError(t *testing.T) {
	f, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("this test needs /dev/full: %v", err)
	}
	s := newFDSink(f)
	defer s.Close(context.Background())
	if s.raw {
		t.Fatal("a character device is written raw")
	}
	packets, _ := fdPackets()
	err = s.Write(context.Background(), packets)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write to /dev/full: %v, want ENOSPC", err)
	}
	if st := s.Stats(); st.Errors != 1 || st.PacketsDroppedError != uint64(len(packets)) || st.PacketsWritten != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Writing a batch allocates nothing once the sink's buffers have grown,
// with announced writes (/dev/null) and raw ones (a memfd).
func TestFDSinkWriteNoAlloc(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{f, memFile(t)} {
		s := newFDSink(f)
		defer s.Close(context.Background())
		packets, _ := fdPackets()
		if n := testing.AllocsPerRun(20, func() {
			if _, err := f.Seek(0, 0); err != nil {
				t.Fatal(err)
			}
			if err := s.Write(context.Background(), packets); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s (raw %v): %.1f allocations per batch", f.Name(), s.raw, n)
		}
	}
}

// memFile is a regular file on tmpfs (a memfd), whatever file system the
// test's temporary directory is on.
func memFile(t *testing.T) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("fdsink-test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	return os.NewFile(uintptr(fd), "memfd")
}

// A regular file on tmpfs gets the raw writev, and every record arrives;
// a write it refuses (the memfd sealed against growing) is an error
// naming the output and a counted loss, as with announced writes.
func TestFDSinkRawRegularFile(t *testing.T) {
	f := memFile(t)
	s := newFDSink(f)
	defer s.Close(context.Background())
	if !s.raw {
		t.Fatal("a memfd is not written raw")
	}
	packets, want := fdPackets()
	if err := s.Write(context.Background(), packets); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want)+1)
	n, err := f.ReadAt(got, 0)
	if n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("memfd holds %d bytes (%v), want the %d of the records", n, err, len(want))
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	err = s.Write(context.Background(), packets)
	if !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "output file") {
		t.Fatalf("write past a sealed end: %v, want EPERM naming the output file", err)
	}
	if st := s.Stats(); st.Errors != 1 || st.PacketsDroppedError != uint64(len(packets)) || st.PacketsWritten != uint64(len(packets)) {
		t.Errorf("stats %+v", st)
	}
}

// A batch of short packets, each copied into the sink's buffer, goes out
// in writes of at most fdSinkBufMax: the buffer does not grow to the
// batch's size (issue 27), and the file is the same. When a later write
// of the batch fails, what went out before counts as written and only
// the rest as a loss.
func TestFDSinkBoundsItsBuffer(t *testing.T) {
	f := memFile(t)
	s := newFDSink(f)
	defer s.Close(context.Background())
	var packets [][]byte
	var want []byte
	for i := range 4 * fdSinkBufMax / 200 {
		p := bytes.Repeat([]byte{byte(i)}, 180+i%19)
		packets = append(packets, p)
		want = tracefile.AppendRecord(want, p)
	}
	if err := s.Write(context.Background(), packets); err != nil {
		t.Fatal(err)
	}
	if c := cap(s.buf); c > 2*fdSinkBufMax || c >= len(want)/2 {
		t.Errorf("the buffer grew to %d bytes for a %d-byte batch; the bound is %d", c, len(want), fdSinkBufMax)
	}
	got := make([]byte, len(want)+1)
	if n, err := f.ReadAt(got, 0); n != len(want) || !bytes.Equal(got[:n], want) {
		t.Fatalf("file holds %d bytes (%v), want the %d of the records", n, err, len(want))
	}

	// Room for the first write of the batch again, not for the second.
	if err := f.Truncate(int64(len(want) + fdSinkBufMax)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(int64(len(want)), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_GROW); err != nil {
		t.Fatal(err)
	}
	err := s.Write(context.Background(), packets)
	if !errors.Is(err, syscall.EPERM) {
		t.Fatalf("write past a sealed end: %v, want EPERM", err)
	}
	st := s.Stats()
	first := uint64(st.PacketsWritten) - uint64(len(packets))
	if st.Errors != 1 || first == 0 || first >= uint64(len(packets)) || st.PacketsDroppedError != uint64(len(packets))-first {
		t.Errorf("stats %+v: want the first write's packets written and the rest dropped", st)
	}
	var payload uint64
	for _, p := range packets {
		payload += uint64(len(p))
	}
	if st.BytesWritten+st.BytesDroppedError != 2*payload || st.BytesDroppedError == 0 {
		t.Errorf("bytes written %d + dropped %d, want the two batches' %d", st.BytesWritten, st.BytesDroppedError, 2*payload)
	}
}
