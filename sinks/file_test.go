package sinks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

var bg = context.Background()

func newTestFile(t *testing.T, opts FileOptions, hooks fileHooks) *FileSink {
	t.Helper()
	if opts.Path == "" {
		opts.Path = filepath.Join(t.TempDir(), "trace.pftrace")
	}
	if opts.FsyncPeriod == 0 && hooks.tick == nil {
		opts.FsyncPeriod = -1
	}
	s, err := newFileSink(opts, hooks)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFileSinkRoundTrip(t *testing.T) {
	s := newTestFile(t, FileOptions{BufferSize: 256}, fileHooks{})
	var all [][]byte
	var bytesIn uint64
	for i := 0; i < 50; i++ {
		batch := [][]byte{mkPacket(2, uint64(i), tracefile.FieldTrackEvent, i*13%400), mkPacket(3, uint64(i), tracefile.FieldSysStats, 0)}
		for _, p := range batch {
			bytesIn += uint64(len(p))
		}
		all = append(all, batch...)
		if err := s.Write(bg, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	samePackets(t, mustRead(t, s.opts.Path), all)
	st := s.Stats()
	if st.PacketsWritten != 100 || st.BytesWritten != bytesIn || st.PacketsDropped() != 0 || st.Errors != 0 || st.FileSyncs != 1 {
		t.Fatalf("stats %+v", st)
	}
	if err := s.Close(bg); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Write(bg, all[:3]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if st := s.Stats(); st.PacketsDroppedError != 3 {
		t.Fatalf("write after close not counted: %+v", st)
	}
}

// TestFileSinkValidAtEveryBoundary reads the file after every write (no
// flush: what a kill -9 would leave) and after every Flush. Records bigger
// than the buffer take the direct path.
func TestFileSinkValidAtEveryBoundary(t *testing.T) {
	s := newTestFile(t, FileOptions{BufferSize: 300}, fileHooks{})
	defer s.Close(bg)
	var all [][]byte
	for i := 0; i < 40; i++ {
		p := mkPacket(2, uint64(i), tracefile.FieldTrackEvent, (i*97)%700)
		all = append(all, p)
		if err := s.Write(bg, [][]byte{p}); err != nil {
			t.Fatal(err)
		}
		got, err := readTrace(t, s.opts.Path)
		if err != nil && !errors.Is(err, tracefile.ErrTruncated) {
			t.Fatalf("after write %d: %v", i, err)
		}
		samePackets(t, got, all[:len(got)])
		if i%3 == 0 {
			if err := s.Flush(bg); err != nil {
				t.Fatal(err)
			}
			samePackets(t, mustRead(t, s.opts.Path), all)
		}
	}
}

// Rotation makes self-contained files: each rotated file starts with the
// service packets, a sync marker, a restore packet per sequence (CLEARED +
// its interned data and defaults since its last CLEARED) and the track
// descriptors, and every file ends with a TraceStats counting the packets
// written so far. Without the preamble and trailers, the set holds every
// packet once, in order; no file reaches the cap unless one record does.
func TestFileSinkRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.pftrace")
	const max = 3000
	s := newTestFile(t, FileOptions{Path: path, MaxFileSize: max, BufferSize: 128}, fileHooks{})
	clock := tracefile.AppendClockSnapshot(tracefile.AppendServiceHeader(nil, 7), []tracefile.Clock{{ID: 6, Timestamp: 1}}, 6)
	interned := appendLenField(nil, 2, appendLenField(nil, 1, []byte("name"))) // event_names {…}
	first := appendLenField(appendVarint(tracefile.AppendTimestamp(nil, 1), tracefile.FieldSequenceFlags, 1), tracefile.FieldInternedData, interned)
	first = tracefile.AppendTrusted(first, tracefile.Trusted{UID: 1000, SequenceID: 2, PID: 42, HasPID: true})
	// A descriptor packet that clears the state (as a writer's first does).
	track := tracefile.AppendTrusted(appendLenField(appendVarint(nil, tracefile.FieldSequenceFlags, 1), tracefile.FieldTrackDescriptor, appendVarint(nil, 1, 77)),
		tracefile.Trusted{UID: 1000, SequenceID: 3, PID: 42, HasPID: true, PreviousPacketDropped: 64})
	all := [][]byte{clock, first, track}
	for i := 0; i < 60; i++ {
		n := 80
		if i == 17 {
			n = 4000 // larger than the cap: a file of its own
		}
		all = append(all, mkPacket(2, uint64(i), tracefile.FieldTrackEvent, n))
	}
	for _, p := range all {
		if err := s.Write(bg, [][]byte{p}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files) || len(files) < 4 {
		t.Fatalf("%d files on disk, sink reports %v", len(entries), files)
	}
	var got [][]byte
	var total uint64
	for i, name := range files {
		if want := FileName(path, i); name != want {
			t.Fatalf("file %d named %s, want %s", i, name, want)
		}
		pkts := mustRead(t, name)
		total += uint64(len(pkts))
		st, _ := os.Stat(name)
		if i > 0 {
			// clock snapshot, sync marker, restore packets of sequences 2
			// and 3, track descriptor.
			if !bytes.Equal(pkts[0], clock) {
				t.Fatalf("%s does not start with the clock snapshot", name)
			}
			if info, _ := tracefile.DecodePacket(pkts[1]); info.PayloadField != tracefile.FieldSynchronizationMarker {
				t.Fatalf("%s: packet 1 is %s, want the sync marker", name, info.Kind())
			}
			r, _ := tracefile.DecodePacket(pkts[2])
			if r.SequenceID != 2 || r.SequenceFlags&1 == 0 || !bytes.Contains(pkts[2], interned) || r.PreviousPacketDropped != 0 {
				t.Fatalf("%s: packet 2 is not sequence 2's restore packet: %+v", name, r)
			}
			if r3, _ := tracefile.DecodePacket(pkts[3]); r3.SequenceID != 3 || r3.SequenceFlags != 1 {
				t.Fatalf("%s: packet 3 is not sequence 3's (empty) restore packet: %+v", name, r3)
			}
			d, _ := tracefile.DecodePacket(pkts[4])
			if d.PayloadField != tracefile.FieldTrackDescriptor || d.PreviousPacketDropped != 0 || d.SequenceFlags != 0 {
				t.Fatalf("%s: packet 4 is not the track descriptor without its loss flag and sequence flags: %+v", name, d)
			}
			pkts = pkts[5:]
		}
		if i < len(files)-1 {
			ts, ok, err := tracefile.DecodeTraceStatsPacket(pkts[len(pkts)-1])
			if !ok || err != nil {
				t.Fatalf("%s does not end with a TraceStats", name)
			}
			if ts.Tracepipe.SinkPacketsWritten != total {
				t.Errorf("%s: its TraceStats counts %d written, the files so far hold %d", name, ts.Tracepipe.SinkPacketsWritten, total)
			}
			pkts = pkts[:len(pkts)-1]
		}
		if st.Size() >= max && len(pkts) != 1 {
			t.Fatalf("%s is %d bytes (cap %d) with %d packets", name, st.Size(), max, len(pkts))
		}
		got = append(got, pkts...)
	}
	samePackets(t, got, all)
	if st := s.Stats(); st.FilesRotated != uint64(len(files)-1) || st.PacketsWritten != total {
		t.Fatalf("%d files holding %d packets, stats %+v", len(files), total, st)
	}
}

func appendVarint(b []byte, num int, v uint64) []byte {
	b = protowire.AppendTag(b, protowire.Number(num), protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// dataPackets drops what rotation adds: the preamble of every file but
// the first (service packets, restore packets, track descriptors) and the
// TraceStats ending every file but the last.
func dataPackets(perFile [][][]byte) [][]byte {
	var out [][]byte
	for i, pkts := range perFile {
		if i > 0 {
			for len(pkts) > 0 {
				info, _ := tracefile.DecodePacket(pkts[0])
				if info.SequenceID != ServiceSequenceID && info.SequenceFlags&1 == 0 && info.PayloadField != tracefile.FieldTrackDescriptor {
					break
				}
				pkts = pkts[1:]
			}
		}
		if i < len(perFile)-1 {
			pkts = pkts[:len(pkts)-1]
		}
		out = append(out, pkts...)
	}
	return out
}

func readAllFiles(t *testing.T, files []string) [][][]byte {
	var out [][][]byte
	for _, f := range files {
		out = append(out, mustRead(t, f))
	}
	return out
}

func TestFileSinkCompression(t *testing.T) {
	for _, comp := range []string{CompressionGzip, CompressionZstd} {
		t.Run(comp, func(t *testing.T) {
			const max = 4000
			s := newTestFile(t, FileOptions{Compression: comp, MaxFileSize: max, BufferSize: 512}, fileHooks{})
			var all [][]byte
			for i := 0; i < 100; i++ {
				p := mkPacket(uint32(2+i%3), uint64(i), tracefile.FieldTrackEvent, 100+i)
				// Varied bytes, so that compression does not make the cap unreachable.
				for j := 20; j < len(p)-20; j++ {
					p[j] = byte(i*j*2654435761>>13) | 0x08
				}
				all = append(all, p)
				if err := s.Write(bg, [][]byte{p}); err != nil {
					t.Fatal(err)
				}
			}
			// Mid-stream: the open file holds every flushed packet and ends
			// like a cut compressed stream.
			if err := s.Flush(bg); err != nil {
				t.Fatal(err)
			}
			files := s.Files()
			last, err := readTrace(t, files[len(files)-1])
			if !errors.Is(err, tracefile.ErrTruncated) {
				t.Fatalf("open compressed file: %v, want ErrTruncated", err)
			}
			samePackets(t, dataPackets(append(readAllFiles(t, files[:len(files)-1]), last)), all)

			if err := s.Close(bg); err != nil {
				t.Fatal(err)
			}
			for _, name := range s.Files() {
				f, _ := os.Open(name)
				rd, err := tracefile.NewReader(f)
				if err != nil || rd.Compression().String() != comp {
					t.Fatalf("%s: compression %v, %v", name, rd.Compression(), err)
				}
				rd.Close()
				f.Close()
				if st, _ := os.Stat(name); st.Size() >= max {
					t.Errorf("%s is %d bytes on disk, cap %d", name, st.Size(), max)
				}
			}
			samePackets(t, dataPackets(readAllFiles(t, s.Files())), all)
			if len(s.Files()) < 2 {
				t.Fatalf("expected rotation, got %v", s.Files())
			}
		})
	}
}

func TestFileSinkNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t")
	if err := os.WriteFile(path, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewFile(FileOptions{Path: path})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("existing file: %v", err)
	}
	// Rotation onto an existing name fails, is counted, and drops.
	path2 := filepath.Join(dir, "u")
	os.WriteFile(FileName(path2, 1), []byte("keep"), 0o644)
	s := newTestFile(t, FileOptions{Path: path2, MaxFileSize: 100}, fileHooks{})
	p := mkPacket(2, 1, tracefile.FieldTrackEvent, 60)
	if err := s.Write(bg, [][]byte{p, p, p}); err == nil {
		t.Fatal("rotation onto an existing file did not fail")
	}
	st := s.Stats()
	// Written: the packet and the TraceStats ending its file.
	if st.PacketsWritten != 2 || st.PacketsDroppedError != 2 || st.Errors == 0 {
		t.Fatalf("stats %+v", st)
	}
	if b, _ := os.ReadFile(FileName(path2, 1)); string(b) != "keep" {
		t.Fatal("existing file modified")
	}
	if files := s.Files(); len(files) != 1 || files[0] != path2 {
		t.Fatalf("Files() = %v: the existing file is not the sink's", files)
	}
	s.Close(bg)
	got := mustRead(t, path2)
	if len(got) != 2 || !bytes.Equal(got[0], p) {
		t.Fatalf("%d packets in the first file", len(got))
	}
	if _, ok, _ := tracefile.DecodeTraceStatsPacket(got[1]); !ok {
		t.Fatal("the first file does not end with its TraceStats")
	}
}

// TestFileSinkFsyncTicker drives the periodic fsync with a fake ticker and
// counts sync calls; no timing involved.
func TestFileSinkFsyncTicker(t *testing.T) {
	tick := make(chan time.Time)
	synced := make(chan int64, 10)
	hooks := fileHooks{tick: tick, sync: func(f *os.File) error {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		synced <- st.Size()
		return nil
	}}
	s := newTestFile(t, FileOptions{}, hooks)
	p := mkPacket(2, 1, tracefile.FieldTrackEvent, 10)
	rec := int64(tracefile.RecordSize(len(p)))
	for round := int64(1); round <= 3; round++ {
		if err := s.Write(bg, [][]byte{p}); err != nil {
			t.Fatal(err)
		}
		tick <- time.Now()
		// The sync sees the buffered record flushed to the file first.
		if size := <-synced; size != round*rec {
			t.Fatalf("round %d: synced file of %d bytes, want %d", round, size, round*rec)
		}
	}
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	if size := <-synced; size != 3*rec {
		t.Fatalf("close sync saw %d bytes", size)
	}
	if st := s.Stats(); st.FileSyncs != 4 {
		t.Fatalf("FileSyncs %d, want 4", st.FileSyncs)
	}
	select {
	case <-synced:
		t.Fatal("extra sync")
	default:
	}
	// A failing sync is counted and reported at Close.
	hooks.sync = func(*os.File) error { return errors.New("disk on fire") }
	hooks.tick = nil
	s = newTestFile(t, FileOptions{FsyncPeriod: -1}, hooks)
	if err := s.Close(bg); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("close with failing sync: %v", err)
	}
	if st := s.Stats(); st.Errors != 1 || st.FileSyncs != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestFileSinkWriteErrorAccounting breaks the file under the sink and
// checks that every packet is either written or dropped, never both.
func TestFileSinkWriteErrorAccounting(t *testing.T) {
	s := newTestFile(t, FileOptions{BufferSize: 1024}, fileHooks{})
	p := mkPacket(2, 1, tracefile.FieldTrackEvent, 100)
	if err := s.Write(bg, [][]byte{p, p}); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(bg); err != nil {
		t.Fatal(err)
	}
	s.f.Close() // the disk goes away
	if err := s.Write(bg, [][]byte{p, p}); err != nil {
		t.Fatalf("buffered write: %v", err)
	}
	if err := s.Flush(bg); err == nil {
		t.Fatal("flush to a closed file succeeded")
	}
	if err := s.Write(bg, [][]byte{p}); err == nil {
		t.Fatal("write after failure succeeded")
	}
	st := s.Stats()
	if st.PacketsWritten != 2 || st.PacketsDroppedError != 3 || st.BytesDroppedError != 3*uint64(len(p)) || st.Errors == 0 {
		t.Fatalf("stats %+v", st)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	s2 := newTestFile(t, FileOptions{}, fileHooks{})
	defer s2.Close(bg)
	if err := s2.Write(ctx, [][]byte{p}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: %v", err)
	}
	if st := s2.Stats(); st.PacketsDroppedError != 1 {
		t.Fatalf("cancelled write not counted: %+v", st)
	}
}

func TestFileSinkWriteAllocs(t *testing.T) {
	for _, comp := range []string{CompressionNone, CompressionZstd, CompressionGzip} {
		s := newTestFile(t, FileOptions{Compression: comp, BufferSize: 64 << 10}, fileHooks{})
		batch := [][]byte{mkPacket(2, 1, tracefile.FieldTrackEvent, 1000), mkPacket(2, 2, tracefile.FieldTrackEvent, 100000)}
		for i := 0; i < 200; i++ { // warm up the compressor's buffers
			s.Write(bg, batch)
		}
		if n := testing.AllocsPerRun(200, func() { s.Write(bg, batch) }); n != 0 {
			t.Errorf("%s: Write allocates %.1f times per call", comp, n)
		}
		s.Close(bg)
	}
}

// An existing file is never overwritten, and the error says what to do.
func TestFileSinkRefusesExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.pftrace")
	if err := os.WriteFile(path, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newFileSink(FileOptions{Path: path, FsyncPeriod: -1}, fileHooks{})
	if err == nil || !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), "{timestamp}") || !strings.Contains(err.Error(), path) {
		t.Fatalf("error %v: want one that wraps fs.ErrExist, names %s and suggests {timestamp}", err, path)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Fatalf("the existing file was changed: %q", b)
	}
}

// On tmpfs the sink writes with raw system calls (rawio): the trace is the
// same, packets larger than the buffer included, and a write the file
// refuses is a counted loss with an error naming the file.
func TestFileSinkRawOnMemoryFS(t *testing.T) {
	mfd, err := unix.MemfdCreate("trace", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatalf("memfd_create: %v", err)
	}
	keep, err := unix.Dup(mfd) // to read it back after the sink closed it
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(keep)
	create := func(string) (*os.File, error) { return os.NewFile(uintptr(mfd), "memfd-trace"), nil }
	s := newTestFile(t, FileOptions{BufferSize: 256}, fileHooks{create: create})
	defer s.Close(bg)
	if s.rawFD < 0 {
		t.Fatal("a file on tmpfs is not written raw")
	}
	var all [][]byte
	for i := 0; i < 40; i++ {
		batch := [][]byte{mkPacket(2, uint64(i), tracefile.FieldTrackEvent, i*37%700), mkPacket(3, uint64(i), tracefile.FieldSysStats, 0)}
		all = append(all, batch...)
		if err := s.Write(bg, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(bg); err != nil {
		t.Fatal(err)
	}
	samePackets(t, mustRead(t, fmt.Sprintf("/proc/self/fd/%d", keep)), all)
	if _, err := unix.FcntlInt(uintptr(keep), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); err != nil {
		t.Fatal(err)
	}
	err = s.Write(bg, [][]byte{mkPacket(2, 99, tracefile.FieldTrackEvent, 600)})
	if err == nil {
		err = s.Flush(bg)
	}
	if !errors.Is(err, syscall.EPERM) || !strings.Contains(err.Error(), "memfd-trace") {
		t.Fatalf("write into a sealed file: %v, want EPERM naming the file", err)
	}
	if st := s.Stats(); st.PacketsWritten != uint64(len(all)) || st.PacketsDroppedError != 1 || st.Errors == 0 {
		t.Errorf("stats %+v, want %d written, 1 dropped and an error", st, len(all))
	}
}
