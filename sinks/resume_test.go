package sinks

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// outageDisk is a file system that the test fills and empties. While
// full, fallocate fails with ENOSPC and a write goes as far as the room
// allocated to its file, then fails with ENOSPC; without fallocate
// (noReserve) it puts half its bytes on disk first (a partial packet).
// With noInodes, creating a file fails with ENOSPC. Its clock is the
// sink's.
type outageDisk struct {
	full, noReserve, noInodes bool
	now                       time.Time
	reserved                  map[*os.File]int64
	probes                    []time.Time // fallocate calls while full
	creates                   int
}

func (d *outageDisk) hooks() fileHooks {
	d.reserved = map[*os.File]int64{}
	return fileHooks{
		write: func(f *os.File, p []byte) (int, error) {
			if !d.full {
				return f.Write(p)
			}
			off, _ := f.Seek(0, io.SeekCurrent)
			room := int64(len(p) / 2)
			if !d.noReserve {
				room = d.reserved[f] - off
			}
			if room >= int64(len(p)) {
				return f.Write(p)
			}
			n, _ := f.Write(p[:max(room, 0)])
			return n, unix.ENOSPC
		},
		fallocate: func(f *os.File, off, n int64) error {
			if d.noReserve {
				return unix.EOPNOTSUPP
			}
			if d.full {
				d.probes = append(d.probes, d.now)
				return unix.ENOSPC
			}
			d.reserved[f] = max(d.reserved[f], off+n)
			return nil
		},
		create: func(name string) (*os.File, error) {
			d.creates++
			if d.noInodes {
				return nil, &fs.PathError{Op: "open", Path: name, Err: unix.ENOSPC}
			}
			return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		},
		now: func() time.Time { return d.now },
	}
}

// dataPacket is test packet i of sequence 2; packetIndex finds i again.
// Its payload is incompressible, so that compressed files fill the
// disk as fast as plain ones.
func dataPacket(i int) []byte {
	body := make([]byte, 150+i%61)
	x := uint64(i)*0x9e3779b97f4a7c15 + 1
	for k := range body {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		body[k] = byte(x)
	}
	p := tracefile.AppendTimestamp(nil, uint64(i)+1)
	p = appendLenField(p, tracefile.FieldTrackEvent, body)
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 1000, SequenceID: 2, PID: 42, HasPID: true})
}

func packetIndex(p []byte) (int, bool) {
	var ts uint64
	var seq uint64
	var event bool
	for len(p) > 0 {
		num, typ, n := protowire.ConsumeTag(p)
		if n < 0 {
			return 0, false
		}
		p = p[n:]
		m := protowire.ConsumeFieldValue(num, typ, p)
		if m < 0 {
			return 0, false
		}
		if typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(p)
			switch int(num) {
			case tracefile.FieldTimestamp:
				ts = v
			case tracefile.FieldTrustedSequenceID:
				seq = v
			}
		}
		event = event || int(num) == tracefile.FieldTrackEvent
		p = p[m:]
	}
	if seq != 2 || !event || ts == 0 {
		return 0, false
	}
	return int(ts - 1), true
}

// servicePacket is the clock snapshot a trace starts with.
func servicePacket() []byte {
	p := tracefile.AppendTimestamp(nil, 1)
	p = appendLenField(p, tracefile.FieldClockSnapshot, []byte{0x0a, 0x02, 0x08, 0x06})
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 0, SequenceID: ServiceSequenceID})
}

// gapState is a packet of sequence 5 that (re)defines its interned data:
// sent while the disk is full, it is dropped, but the file the sink
// resumes in must restore it.
var gapMarker = []byte("interned-during-the-gap")

func gapState() []byte {
	p := tracefile.AppendTimestamp(nil, 7)
	p = protowire.AppendTag(p, tracefile.FieldSequenceFlags, protowire.VarintType)
	p = protowire.AppendVarint(p, tracefile.SeqIncrementalStateCleared)
	p = appendLenField(p, tracefile.FieldInternedData, appendLenField(nil, 2, gapMarker))
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 1000, SequenceID: 5, PID: 43, HasPID: true})
}

func statsOf(t *testing.T, p []byte) (tracefile.TraceStats, bool) {
	t.Helper()
	ts, ok, err := tracefile.DecodeTraceStatsPacket(p)
	if err != nil {
		t.Fatalf("a TraceStats packet does not decode: %v", err)
	}
	return ts, ok && ts.Tracepipe != nil
}

// A sink with on_error: drop whose disk fills up counts what it drops,
// tries again after a second, and once there is room continues in a new
// file: the old one reads cleanly to its last whole packet and ends with
// a TraceStats recording the loss; the new one starts self-contained (the
// service packets, the state of a sequence whose packets were all
// dropped) and records the gap in a TraceStats right after its preamble;
// every packet handed to the sink is in a file or counted as dropped,
// exactly once.
func TestFileSinkResumesAfterDiskFull(t *testing.T) {
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
			disk := &outageDisk{noReserve: c.noReserve, now: time.Unix(1000, 0)}
			path := filepath.Join(t.TempDir(), "t.pftrace")
			var log bytes.Buffer
			s := newTestFile(t, FileOptions{Path: path, Compression: c.comp, BufferSize: 4 << 10, ResumeMax: 8 * time.Second,
				Logger: slog.New(slog.NewTextHandler(&log, nil))}, disk.hooks())
			sent := 0
			send := func(p []byte) error {
				if _, ok := packetIndex(p); ok {
					sent++
				}
				return s.Write(bg, [][]byte{p})
			}
			if err := send(servicePacket()); err != nil {
				t.Fatal(err)
			}
			next := 0
			for ; next < 100; next++ {
				if err := send(dataPacket(next)); err != nil {
					t.Fatal(err)
				}
			}
			disk.full = true
			for ; ; next++ {
				if next > 10000 {
					t.Fatal("the full disk was never noticed")
				}
				if err := send(dataPacket(next)); err != nil {
					if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "tries again") {
						t.Fatalf("the failure %q does not say ENOSPC and that the sink tries again", err)
					}
					break
				}
			}
			failedAt := disk.now
			_ = s.Write(bg, [][]byte{gapState()}) // dropped; its state must survive
			disk.now = failedAt.Add(500 * time.Millisecond)
			disk.full = false // room for a moment, but no attempt is due yet
			for range 5 {
				next++
				if err := send(dataPacket(next)); err == nil {
					t.Fatal("the sink resumed before its first attempt was due")
				}
			}
			if n := len(s.Files()); n != 1 {
				t.Fatalf("%d files before the first attempt", n)
			}
			// The first attempt finds the disk full again; the next one
			// is due 2 s later.
			disk.full = true
			disk.now = failedAt.Add(time.Second)
			next++
			if err := send(dataPacket(next)); err == nil {
				t.Fatal("resumed on a full disk")
			}
			disk.full = false
			disk.now = failedAt.Add(2900 * time.Millisecond)
			next++
			if err := send(dataPacket(next)); err == nil {
				t.Fatal("the second attempt came early")
			}
			disk.now = failedAt.Add(3 * time.Second)
			next++
			if err := send(dataPacket(next)); err != nil {
				t.Fatalf("the sink did not resume when its attempt was due: %v", err)
			}
			if s.Failed() != nil {
				t.Fatalf("resumed, but Failed() = %v", s.Failed())
			}
			// Logged once, with what the outage cost.
			lost := s.Stats().PacketsDroppedError
			if n := strings.Count(log.String(), "room again"); n != 1 || !strings.Contains(log.String(), fmt.Sprintf("%d packets were lost meanwhile", lost)) {
				t.Errorf("resume logged %d times, want once with %d packets lost: %s", n, lost, log.String())
			}
			for range 100 {
				next++
				if err := send(dataPacket(next)); err != nil {
					t.Fatal(err)
				}
			}
			st := s.Stats()
			if st.Reconnects != 1 || st.PacketsDroppedError == 0 {
				t.Fatalf("stats %+v: want one resume and the drops", st)
			}
			final := tracefile.TraceStats{Tracepipe: &tracefile.TracepipeStats{}}
			setSinkCounters(final.Tracepipe, st)
			if err := s.WriteLast(tracefile.AppendTraceStatsPacket(nil, &final, 0, 2)); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(bg); err != nil {
				t.Fatal(err)
			}
			st = s.Stats()

			files := s.Files()
			if len(files) != 2 {
				t.Fatalf("files %v: want the one that filled up and the one resumed in", files)
			}
			var inFiles, found int
			last := -1
			for fi, name := range files {
				pkts, err := readTrace(t, name)
				if err != nil {
					t.Fatalf("%s does not read cleanly after %d packets: %v", name, len(pkts), err)
				}
				if len(pkts) == 0 {
					fi, _ := os.Stat(name)
					t.Fatalf("%s holds no packet (%d bytes)", name, fi.Size())
				}
				inFiles += len(pkts)
				end, ok := statsOf(t, pkts[len(pkts)-1])
				if !ok || end.Tracepipe.SinkPacketsDropped == 0 {
					t.Errorf("%s does not end with a TraceStats recording the loss", name)
				}
				if fi == 0 && end.Tracepipe.SinkPacketsWritten != uint64(len(pkts)) {
					t.Errorf("%s: its TraceStats counts %d written, it holds %d", name, end.Tracepipe.SinkPacketsWritten, len(pkts))
				}
				if !tracefile.HasDataLoss(tracefile.LossReport(end)) {
					t.Errorf("%s: the loss report of its last TraceStats finds no loss", name)
				}
				gapRecorded, restored := false, false
				for i, p := range pkts {
					if k, ok := packetIndex(p); ok {
						if k <= last {
							t.Fatalf("%s: packet %d after %d (duplicate or out of order)", name, k, last)
						}
						if fi == 1 && !gapRecorded {
							t.Fatalf("%s: packet %d before the TraceStats recording the gap", name, k)
						}
						last = k
						found++
						continue
					}
					if fi == 1 && i == 0 && !bytes.Equal(p, servicePacket()) {
						t.Errorf("%s does not start with the service packets", name)
					}
					if fi == 1 && bytes.Contains(p, gapMarker) {
						restored = true
					}
					if ts, ok := statsOf(t, p); ok && fi == 1 && !gapRecorded && i < len(pkts)-1 {
						gapRecorded = true
						if ts.Tracepipe.SinkPacketsDropped == 0 || ts.Tracepipe.SinkReconnects != 1 {
							t.Errorf("the gap's TraceStats: dropped %d, reconnects %d", ts.Tracepipe.SinkPacketsDropped, ts.Tracepipe.SinkReconnects)
						}
					}
				}
				if fi == 1 && !restored {
					t.Errorf("%s does not restore the state sequence 5 set during the gap", name)
				}
			}
			if st.PacketsWritten != uint64(inFiles) {
				t.Errorf("stats count %d written, the files hold %d", st.PacketsWritten, inFiles)
			}
			// The gap state packet is dropped too, but not a data packet.
			if uint64(found)+st.PacketsDroppedError-1 != uint64(sent) {
				t.Errorf("%d data packets sent: %d in the files + %d dropped", sent, found, st.PacketsDroppedError-1)
			}
			if last != next {
				t.Errorf("the last packet in the files is %d, want %d", last, next)
			}
		})
	}
}

// Attempts back off: 1 s after the failure, then at doubling intervals up
// to ResumeMax; a disk that stays full gets no new files.
func TestFileSinkResumeBacksOff(t *testing.T) {
	disk := &outageDisk{now: time.Unix(1000, 0)}
	s := newTestFile(t, FileOptions{BufferSize: 4 << 10, ResumeMax: 4 * time.Second}, disk.hooks())
	defer s.Close(bg)
	if err := s.Write(bg, [][]byte{servicePacket(), dataPacket(0)}); err != nil {
		t.Fatal(err)
	}
	disk.full = true
	start := disk.now
	for i := 1; s.Write(bg, [][]byte{dataPacket(i)}) == nil; i++ {
		if i > 10000 {
			t.Fatal("the full disk was never noticed")
		}
	}
	disk.probes = nil
	for step := range 200 { // 20 s, a write every 100 ms
		disk.now = start.Add(time.Duration(step+1) * 100 * time.Millisecond)
		_ = s.Write(bg, [][]byte{dataPacket(1)})
		_ = s.Flush(bg)
	}
	var got []time.Duration
	for _, p := range disk.probes {
		got = append(got, p.Sub(start))
	}
	want := []time.Duration{1 * time.Second, 3 * time.Second, 7 * time.Second, 11 * time.Second, 15 * time.Second, 19 * time.Second}
	if len(got) != len(want) {
		t.Fatalf("attempts at %v, want at %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("attempts at %v, want at %v", got, want)
		}
	}
	if n := len(s.Files()); n != 1 || disk.creates != 1 {
		t.Fatalf("a disk that stays full got %d files (%d creates)", n, disk.creates)
	}
}

// on_error: stop (no ResumeMax): the first failure is final.
func TestFileSinkNoResumeWithoutResumeMax(t *testing.T) {
	disk := &outageDisk{now: time.Unix(1000, 0)}
	s := newTestFile(t, FileOptions{BufferSize: 4 << 10}, disk.hooks())
	defer s.Close(bg)
	disk.full = true
	for i := 0; s.Write(bg, [][]byte{dataPacket(i)}) == nil; i++ {
		if i > 10000 {
			t.Fatal("the full disk was never noticed")
		}
	}
	disk.full = false
	disk.now = disk.now.Add(time.Hour)
	if err := s.Write(bg, [][]byte{dataPacket(0)}); err == nil || strings.Contains(err.Error(), "tries again") {
		t.Fatalf("a sink without ResumeMax: %v", err)
	}
	if len(s.Files()) != 1 || s.Stats().Reconnects != 0 {
		t.Fatalf("files %v, stats %+v", s.Files(), s.Stats())
	}
}

// A rotation whose next file cannot be created (the disk is full): the
// file is not listed (it does not exist), and what the sink drops
// meanwhile reaches its counters, its lane's (the run summary, the
// status and metrics), and the next file that opens once there is room,
// whose TraceStats count it; the final TraceStats too.
func TestFileSinkFailedRotationCountsReachNextFile(t *testing.T) {
	disk := &outageDisk{now: time.Unix(1000, 0)}
	path := filepath.Join(t.TempDir(), "r.pftrace")
	s := newTestFile(t, FileOptions{Path: path, MaxFileSize: 16 << 10, BufferSize: 4 << 10, ResumeMax: 2 * time.Second}, disk.hooks())
	l := NewLane(s, LaneConfig{Name: "r"})
	offer := func(packets ...[]byte) {
		it := &Item{Packets: packets, Flush: true}
		it.Hold(1)
		l.Offer(bg, it)
		if err := l.Flush(bg); err != nil && !errors.Is(err, unix.ENOSPC) {
			t.Fatal(err)
		}
	}
	offer(servicePacket())
	i := 0
	for ; len(s.Files()) < 2; i++ { // into the second file
		offer(dataPacket(i))
	}
	// No inode is left for the third file: creating it fails.
	disk.noInodes = true
	for ; s.Failed() == nil; i++ {
		if i > 10000 {
			t.Fatal("the sink never failed")
		}
		offer(dataPacket(i))
	}
	if !strings.Contains(s.Failed().Error(), "creating") || !errors.Is(s.Failed(), unix.ENOSPC) {
		t.Fatalf("failure %v: want the failed creation of the next file", s.Failed())
	}
	for range 10 {
		i++
		offer(dataPacket(i))
	}
	if files := s.Files(); len(files) != 2 {
		t.Fatalf("Files() = %v lists a file never created", files)
	}
	dropped := s.Stats().PacketsDroppedError
	if dropped < 10 {
		t.Fatalf("%d dropped", dropped)
	}
	if snap := l.Snapshot(); snap.PacketsDroppedError != dropped {
		t.Errorf("the lane's snapshot (status, metrics) counts %d dropped, the sink %d", snap.PacketsDroppedError, dropped)
	}
	if p, ok := l.PeerStats(); !ok || p.PacketsDropped != dropped {
		t.Errorf("peer stats %+v, %v", p, ok)
	}
	disk.noInodes = false
	disk.now = disk.now.Add(time.Second)
	i++
	offer(dataPacket(i))
	files := s.Files()
	if len(files) != 3 {
		t.Fatalf("files %v after room came back", files)
	}
	pkts := mustRead(t, files[2])
	var gap *tracefile.TraceStats
	for _, p := range pkts {
		if ts, ok := statsOf(t, p); ok {
			gap = &ts
			break
		}
	}
	if gap == nil || gap.Tracepipe.SinkPacketsDropped != dropped {
		t.Fatalf("the next file's first TraceStats: %+v; want %d dropped", gap, dropped)
	}
	fin := &Item{Stats: &tracefile.TraceStats{}, Final: true, Flush: true}
	fin.Hold(1)
	l.Offer(bg, fin)
	if err := l.Close(bg); err != nil {
		t.Fatal(err)
	}
	pkts = mustRead(t, files[2])
	end, ok := statsOf(t, pkts[len(pkts)-1])
	if !ok || end.Tracepipe.SinkPacketsDropped != dropped {
		t.Fatalf("the final TraceStats counts %+v dropped; want %d", end.Tracepipe, dropped)
	}
	if sum := l.Stats(); sum.PacketsDroppedError != dropped || sum.Reconnects != 1 {
		t.Errorf("the lane's final stats (run summary) %+v; want %d dropped, one resume", sum, dropped)
	}
}

// disk_full_retry_max: checked, defaulted, and in force only with
// on_error: drop (a sink that stops the session does not resume).
func TestFileSinkResumeConfig(t *testing.T) {
	bad := Config{Type: SinkTypeFile, Sections: map[string]map[string]any{SinkTypeFile: {"path": "x.pftrace", "disk_full_retry_max": "10ms"}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "disk_full_retry_max") {
		t.Fatalf("10ms validated: %v", err)
	}
	dir := t.TempDir()
	for i, c := range []struct {
		onError, retry string
		want           time.Duration
	}{
		{OnErrorDrop, "", DefaultResumeMax},
		{OnErrorDrop, "5s", 5 * time.Second},
		{OnErrorDrop, "-1s", 0},
		{OnErrorStop, "5s", 0},
		{"", "", DefaultResumeMax}, // the lane's default (drop)
	} {
		sec := map[string]any{"path": filepath.Join(dir, "t"+string(rune('a'+i))+".pftrace")}
		if c.retry != "" {
			sec["disk_full_retry_max"] = c.retry
		}
		l, err := OpenLane(Config{Type: SinkTypeFile, OnError: c.onError, Sections: map[string]map[string]any{SinkTypeFile: sec}}, Env{}, LaneOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := l.Sink().(*FileSink).opts.ResumeMax
		_ = l.Close(bg)
		if got != c.want {
			t.Errorf("on_error %q, disk_full_retry_max %q: ResumeMax %v, want %v", c.onError, c.retry, got, c.want)
		}
	}
}

// Writing with resume on does not allocate, nor does dropping during an
// outage (the packets folded, the attempt not yet due).
func TestFileSinkResumeWriteAllocs(t *testing.T) {
	disk := &outageDisk{now: time.Unix(1000, 0)}
	s := newTestFile(t, FileOptions{BufferSize: 64 << 10, ResumeMax: time.Minute}, disk.hooks())
	defer s.Close(bg)
	batch := [][]byte{dataPacket(1), dataPacket(2)}
	for range 200 {
		_ = s.Write(bg, batch)
	}
	if n := testing.AllocsPerRun(200, func() { _ = s.Write(bg, batch) }); n != 0 {
		t.Errorf("Write allocates %.1f times per call", n)
	}
	disk.full = true
	for i := 0; s.Write(bg, batch) == nil; i++ {
		if i > 100000 {
			t.Fatal("the full disk was never noticed")
		}
	}
	if n := testing.AllocsPerRun(200, func() { _ = s.Write(bg, batch) }); n != 0 {
		t.Errorf("Write during an outage allocates %.1f times per call", n)
	}
}
