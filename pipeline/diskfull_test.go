package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of size bytes on a temporary directory.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	return mountTmpfsOpts(t, "size="+strconv.Itoa(size))
}

// mountTmpfsOpts mounts a tmpfs with mount options opts.
func mountTmpfsOpts(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v; needs CAP_SYS_ADMIN): sinks.TestFileSinkDiskFull covers a full disk with an injected ENOSPC writer", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// The user report: a 2 MiB tmpfs as output. The only file sink fails
// (on_error: stop by default): the session stops gracefully, Run says so,
// the file reads cleanly to its last packet and ends with a TraceStats
// that counts exactly the packets in the file and records the loss, and
// the result reports what reached the file, not what was offered.
func TestServiceDiskFullTmpfs(t *testing.T) {
	dir := mountTmpfs(t, 2<<20)
	path := filepath.Join(dir, "t.pftrace")
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 32768}] # holds all 12 MB: no ring loss on a loaded machine
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 2, packets: 20000, sizes: [300]}
sinks: [{type: file, path: `+path+`}]
`)
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Run(ctx)
	if err == nil || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Run returned %v; want the sink's ENOSPC", err)
	}
	if f := s.Status().SinkFailures; len(f) != 1 || !strings.Contains(f[0], "no space left") {
		t.Errorf("status shows sink failures %q", f)
	}
	pkts := tracetest.ReadTrace(t, path) // fails the test on a truncated record
	ts := lastStats(t, pkts)
	if !isTraceStats(pkts[len(pkts)-1]) {
		t.Fatal("the file does not end with its TraceStats")
	}
	tp := ts.Tracepipe
	if tp.SinkPacketsWritten != uint64(len(pkts)) {
		t.Errorf("TraceStats: %d packets written; the file holds %d", tp.SinkPacketsWritten, len(pkts))
	}
	if tp.SinkErrors == 0 {
		t.Error("TraceStats records no sink error")
	}
	r := res.Sinks[0]
	if r.Stats.PacketsWritten != uint64(len(pkts)) || r.Err == nil {
		t.Errorf("result: %d written (file holds %d), err %v", r.Stats.PacketsWritten, len(pkts), r.Err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() > 2<<20 {
		t.Errorf("file: %v %v", fi, err)
	}
}

// on_error: drop: the full disk's sink counts what it loses and the
// session runs to its end; the other sink's file is complete; the full
// one still ends with its TraceStats recording the loss.
func TestServiceDiskFullDropPolicy(t *testing.T) {
	full := filepath.Join(mountTmpfs(t, 2<<20), "t.pftrace")
	other := filepath.Join(t.TempDir(), "other.pftrace")
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 32768}] # holds all 12 MB: no ring loss on a loaded machine
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 2, packets: 20000, sizes: [300]}
sinks:
  - {type: file, path: `+full+`, on_error: drop}
  - {type: file, path: `+other+`}
`)
	res := runSession(t, cfg) // no error: the session ran to its end
	if res.Sinks[0].Err == nil || !errors.Is(res.Sinks[0].Err, unix.ENOSPC) {
		t.Errorf("full sink's error: %v", res.Sinks[0].Err)
	}
	if n := len(countScripted(tracetest.ReadTrace(t, other))); n != 40000 {
		t.Errorf("the other sink holds %d scripted packets, want 40000; stats %+v %+v", n, res.Stats.BufferStats, res.Stats.Tracepipe)
	}
	pkts := tracetest.ReadTrace(t, full)
	tp := lastStats(t, pkts).Tracepipe
	if !isTraceStats(pkts[len(pkts)-1]) || tp.SinkPacketsWritten != uint64(len(pkts)) || tp.SinkPacketsDropped == 0 {
		t.Errorf("full file: %d packets, last TraceStats written %d dropped %d", len(pkts), tp.SinkPacketsWritten, tp.SinkPacketsDropped)
	}
}

// gated is a test data source that writes its packets in phases: phase k
// writes packets [k*per, (k+1)*per) of each writer (scriptedPacket), then
// waits until the test opens the gate (gates[gate]) before the next one.
// Config: gate (string), writers, per (packets per phase), phases, size.
type gated struct {
	gate                       chan struct{}
	writers, per, phases, size int
	done                       chan struct{}
}

var gates sync.Map // name → chan struct{}

func init() {
	plugins.Register("test.gated", func(cfg map[string]any) (plugins.DataSource, error) {
		g := &gated{writers: 1, per: 100, phases: 2, size: 300, done: make(chan struct{})}
		for k, v := range cfg {
			switch k {
			case "gate":
				ch, ok := gates.Load(v.(string))
				if !ok {
					return nil, fmt.Errorf("gate %q: not opened by the test", v)
				}
				g.gate = ch.(chan struct{})
			case "writers":
				g.writers = v.(int)
			case "per":
				g.per = v.(int)
			case "phases":
				g.phases = v.(int)
			case "size":
				g.size = v.(int)
			default:
				return nil, fmt.Errorf("%s: unknown key", k)
			}
		}
		if g.gate == nil {
			return nil, errors.New("gate: required")
		}
		return g, nil
	})
}

func (g *gated) Start(h plugins.Host) error {
	var pws []plugins.PacketWriter
	for range g.writers {
		pw, err := h.NewWriter()
		if err != nil {
			return err
		}
		pws = append(pws, pw)
	}
	go func() {
		defer close(g.done)
		for k := range g.phases {
			if k > 0 {
				<-g.gate
			}
			for w, pw := range pws {
				for i := k * g.per; i < (k+1)*g.per; i++ {
					_ = pw.WritePacket(scriptedPacket(w, i, g.size, false))
				}
				_ = pw.Flush()
			}
		}
	}()
	return nil
}

func (g *gated) Flush() error           { return nil }
func (g *gated) ClearIncrementalState() {}
func (g *gated) Stop() error            { <-g.done; return nil }
func (g *gated) Done() <-chan struct{}  { return g.done }

// The user report behind resuming: an hours-long session whose disk fills
// up, then gets room again (a ballast file removed). With on_error: drop
// the sink counts what it drops meanwhile, resumes within
// disk_full_retry_max of the room coming back, and writes everything
// after it into the next file, which starts with a TraceStats naming the
// gap; every file reads cleanly; every scripted packet is in a file or
// counted; the session ends without error and the result counts one
// resume.
func TestServiceDiskFullResumes(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	ballast := filepath.Join(dir, "ballast")
	if err := os.WriteFile(ballast, make([]byte, 5<<19), 0o644); err != nil { // 2.5 MiB
		t.Fatal(err)
	}
	res, files := runUntilResumed(t, filepath.Join(dir, "t.pftrace"), "", ballast)
	if len(files) != 2 {
		t.Fatalf("files %v: want the full one and the one resumed in", files)
	}
	_ = res
}

// A rotation whose next file cannot be created (no inode left on the
// tmpfs): the files listed are the ones that exist, and the packets the
// sink drops until an inode is free again are counted in the summary and
// in the next file, created when the sink resumes.
func TestServiceFailedRotationResumes(t *testing.T) {
	// The root, the ballast directory and its 4 files, t.pftrace,
	// t.1.pftrace: t.2.pftrace finds no inode.
	dir := mountTmpfsOpts(t, "size=16m,nr_inodes=8")
	ballast := filepath.Join(dir, "ballast")
	if err := os.Mkdir(ballast, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(ballast, strconv.Itoa(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "t.pftrace")
	res, files := runUntilResumed(t, path, "max_file_size: 1MiB, ", ballast)
	if len(files) < 3 || files[2] != sinks.FileName(path, 2) {
		t.Fatalf("files %v: want t.2.pftrace after the resume", files)
	}
	if !strings.Contains(res.Sinks[0].Err.Error(), "creating "+sinks.FileName(path, 2)) {
		t.Errorf("the sink's failure %v does not name the file it could not create", res.Sinks[0].Err)
	}
}

// runUntilResumed runs a session of two phases of scripted packets whose
// only sink (on_error: drop, file section extra) runs out of room in the
// first; then removes ballast and, once the sink resumed, lets the second
// phase run. It checks what both tests share and returns the result and
// the sink's files.
func runUntilResumed(t *testing.T, path, extra, ballast string) (*Result, []string) {
	t.Helper()
	gate := make(chan struct{})
	gates.Store(t.Name(), gate)
	defer gates.Delete(t.Name())
	const writers, per = 2, 4000 // 2.4 MB a phase: more than the room left
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 32768}]
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.gated
    buffer_exhausted_policy: stall
    config: {gate: `+t.Name()+`, writers: 2, per: 4000, phases: 2, size: 300}
sinks:
  - {type: file, on_error: drop, file: {`+extra+`path: `+path+`, disk_full_retry_max: 200ms}}
`)
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		res *Result
		err error
	}
	ran := make(chan result, 1)
	go func() {
		res, err := s.Run(ctx)
		ran <- result{res, err}
	}()
	sink := func() sinks.SinkStats {
		if st := s.Status().Sinks; len(st) > 0 {
			return st[0].Stats
		}
		return sinks.SinkStats{}
	}
	testsupport.WaitUntil(t, "the sink failed", time.Minute, func() bool { return len(s.Status().SinkFailures) > 0 })
	if n := len(s.Files()); n == 0 {
		t.Error("no file listed")
	} else if _, err := os.Stat(s.Files()[n-1]); err != nil {
		t.Errorf("a file listed does not exist: %v", err)
	}
	var droppedBefore uint64
	testsupport.WaitUntil(t, "the sink counted drops", time.Minute, func() bool { droppedBefore = sink().PacketsDroppedError; return droppedBefore > 0 })
	if err := os.RemoveAll(ballast); err != nil {
		t.Fatal(err)
	}
	testsupport.WaitUntil(t, "the sink resumed", time.Minute, func() bool { return sink().Reconnects > 0 })
	close(gate) // phase 2: all of it must reach the resumed file
	r := <-ran
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	res := r.res
	st := res.Sinks[0].Stats
	if st.Reconnects != 1 || st.PacketsDroppedError < droppedBefore {
		t.Errorf("sink stats %+v: want one resume and at least the %d drops seen during the outage", st, droppedBefore)
	}
	files := res.Sinks[0].Files
	if len(files) < 2 {
		t.Fatalf("files %v", files)
	}
	var all []tracetest.Packet
	var written uint64
	gapSeen := false
	for i, name := range files {
		pkts := tracetest.ReadTrace(t, name)
		all = append(all, pkts...)
		written += uint64(len(pkts))
		if i < len(files)-1 {
			if tp := lastStats(t, pkts).Tracepipe; tp.SinkPacketsWritten != written {
				t.Errorf("%s ends with written %d; the files so far hold %d", name, tp.SinkPacketsWritten, written)
			}
		}
		if gapSeen {
			continue
		}
		// The file resumed in starts with a TraceStats naming the gap,
		// before any scripted packet.
		for _, p := range pkts {
			if isTraceStats(p) {
				ts, _, _ := tracefile.DecodeTraceStatsPacket(p.Raw)
				if ts.Tracepipe != nil && ts.Tracepipe.SinkReconnects == 1 {
					gapSeen = true
					if ts.Tracepipe.SinkPacketsDropped < droppedBefore {
						t.Errorf("%s: its first TraceStats counts %d dropped; %d were counted before the resume", name, ts.Tracepipe.SinkPacketsDropped, droppedBefore)
					}
				}
				break
			}
			if _, _, _, ok := tracetest.ScriptedID(p.Raw); ok {
				break
			}
		}
	}
	if !gapSeen {
		t.Error("no file starts with a TraceStats recording the gap")
	}
	last := lastStats(t, all)
	if !tracefile.HasDataLoss(tracefile.LossReport(last)) || last.Tracepipe.SinkPacketsDropped != st.PacketsDroppedError+st.PacketsDroppedQueue {
		t.Errorf("the last TraceStats counts %d dropped (run summary: %+v)", last.Tracepipe.SinkPacketsDropped, st)
	}
	seen := countScripted(all)
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("scripted packet %v appears %d times", k, n)
		}
	}
	for w := range writers {
		for i := per; i < 2*per; i++ {
			if seen[[2]int{w, i}] != 1 {
				t.Fatalf("phase 2 packet %d/%d (after the resume) is missing", w, i)
			}
		}
	}
	if lost := writers*2*per - len(seen); lost == 0 || uint64(lost) > st.PacketsDroppedError {
		t.Errorf("%d scripted packets missing, %d counted dropped", lost, st.PacketsDroppedError)
	}
	return res, files
}
