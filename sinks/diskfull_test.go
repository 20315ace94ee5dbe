package sinks

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tracepipe/tracepipe/tracefile"
)

// fakeDisk models a file system with room for capacity bytes: writes
// beyond it are cut short with ENOSPC, and fallocate counts against it.
type fakeDisk struct {
	capacity  int64
	noReserve bool // fallocate is not supported
}

func (d *fakeDisk) hooks() fileHooks {
	return fileHooks{
		write: func(f *os.File, p []byte) (int, error) {
			// Allocated space never exceeds capacity, so a write may
			// reach up to capacity and no further.
			off, _ := f.Seek(0, io.SeekCurrent)
			if n := d.capacity - off; int64(len(p)) > n {
				w, _ := f.Write(p[:max(n, 0)])
				return w, unix.ENOSPC
			}
			return f.Write(p)
		},
		fallocate: func(f *os.File, off, n int64) error {
			if d.noReserve {
				return unix.EOPNOTSUPP
			}
			if off+n > d.capacity {
				return unix.ENOSPC
			}
			return nil
		},
	}
}

// A full disk: the sink sees it at once (Write fails), takes no more
// packets, and the final TraceStats still reaches the file, which reads
// cleanly to its last packet — with the reserve, uncompressed and
// compressed, and without it (the file is cut back to its last complete
// packet).
func TestFileSinkDiskFull(t *testing.T) {
	for _, c := range []struct {
		name      string
		comp      string
		noReserve bool
	}{
		{"reserve", CompressionNone, false},
		{"reserve zstd", CompressionZstd, false},
		{"reserve gzip", CompressionGzip, false},
		{"truncate back", CompressionNone, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			disk := &fakeDisk{capacity: 600 << 10, noReserve: c.noReserve}
			path := filepath.Join(t.TempDir(), "full.pftrace")
			s, err := newFileSink(FileOptions{Path: path, Compression: c.comp, FsyncPeriod: -1, BufferSize: 64 << 10}, disk.hooks())
			if err != nil {
				t.Fatal(err)
			}
			var failedAt int
			for i := range 100000 {
				// Incompressible-ish payloads so compression cannot hide the fill.
				p := mkPacket(2, uint64(i)*2654435761, tracefile.FieldTrackEvent, 200+i%37)
				if err := s.Write(bg, [][]byte{p}); err != nil {
					if !errors.Is(err, unix.ENOSPC) {
						t.Fatalf("write error %v does not say ENOSPC", err)
					}
					failedAt = i
					break
				}
			}
			if failedAt == 0 {
				t.Fatal("the disk never filled")
			}
			// Refused from now on, and counted.
			before := s.Stats().PacketsDroppedError
			if err := s.Write(bg, [][]byte{mkPacket(2, 1, tracefile.FieldTrackEvent, 10)}); err == nil {
				t.Fatal("a failed sink accepted a packet")
			}
			if s.Stats().PacketsDroppedError != before+1 {
				t.Error("the refused packet was not counted")
			}
			st := s.Stats()
			ts := tracefile.TraceStats{Tracepipe: &tracefile.TracepipeStats{SinkPacketsWritten: st.PacketsWritten + 1, SinkPacketsDropped: st.PacketsDroppedError, SinkErrors: st.Errors}}
			stats := tracefile.AppendTraceStatsPacket(nil, &ts, 0, 1)
			if err := s.WriteLast(stats); err != nil {
				t.Fatalf("WriteLast: %v", err)
			}
			_ = s.Close(bg)
			pkts, rerr := readTrace(t, path)
			if rerr != nil {
				t.Fatalf("the file does not read cleanly after %d packets: %v", len(pkts), rerr)
			}
			got, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1])
			if !ok || err != nil {
				t.Fatal("the file does not end with the TraceStats")
			}
			if got.Tracepipe.SinkPacketsWritten != uint64(len(pkts)) {
				t.Errorf("TraceStats counts %d written, the file holds %d", got.Tracepipe.SinkPacketsWritten, len(pkts))
			}
			if got.Tracepipe.SinkPacketsDropped == 0 {
				t.Error("the TraceStats records no loss")
			}
			if fi, _ := os.Stat(path); fi.Size() > disk.capacity {
				t.Errorf("file is %d bytes on a %d-byte disk", fi.Size(), disk.capacity)
			}
		})
	}
}
