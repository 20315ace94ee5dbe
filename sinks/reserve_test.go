package sinks

import (
	"os"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// countingDisk records the reserve's fallocate calls and how far they
// reach.
type countingDisk struct {
	calls    int
	reserved int64
}

func (d *countingDisk) hooks() fileHooks {
	return fileHooks{fallocate: func(f *os.File, off, n int64) error {
		d.calls++
		d.reserved = max(d.reserved, off+n)
		return nil
	}}
}

// The reserve grows in steps of several buffer flushes, so fallocate
// runs once every few flushes rather than before each, and it is never
// short of ReserveSize/2 when a Write returns.
func TestFileSinkReserveSteps(t *testing.T) {
	disk := &countingDisk{}
	s := newTestFile(t, FileOptions{}, disk.hooks()) // the default 256 KiB buffer
	defer s.Close(bg)
	batch := make([][]byte, 64)
	for i := range batch {
		batch[i] = mkPacket(2, uint64(i), tracefile.FieldTrackEvent, 1000)
	}
	const total = 16 << 20
	for written := 0; written < total; written += 64 * 1000 {
		if err := s.Write(bg, batch); err != nil {
			t.Fatal(err)
		}
		if room := disk.reserved - s.disk; room < ReserveSize/2 {
			t.Fatalf("the reserve is %d bytes past the end of the file, want >= %d", room, ReserveSize/2)
		}
	}
	flushes := total / DefaultFileBufferSize
	if disk.calls > flushes/3 {
		t.Fatalf("fallocate ran %d times for %d flushes", disk.calls, flushes)
	}
}

// A disk with room for the reserve but not for a whole step: the sink
// keeps taking packets until the reserve itself no longer fits, as it
// did with a step the size of the reserve.
func TestFileSinkReserveStepFallsBack(t *testing.T) {
	const capacity = 2 << 20
	disk := &fakeDisk{capacity: capacity}
	s := newTestFile(t, FileOptions{}, disk.hooks())
	var i int
	for ; s.Write(bg, [][]byte{mkPacket(2, uint64(i), tracefile.FieldTrackEvent, 1000)}) == nil; i++ {
		if i > 1e5 {
			t.Fatal("the disk never filled")
		}
	}
	_ = s.Close(bg)
	fi, err := os.Stat(s.opts.Path)
	if err != nil {
		t.Fatal(err)
	}
	if min := int64(capacity - ReserveSize - DefaultFileBufferSize - 2<<10); fi.Size() < min {
		t.Fatalf("the sink stopped at %d bytes of a %d-byte disk, want >= %d", fi.Size(), capacity, min)
	}
}
