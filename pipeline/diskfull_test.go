package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"

	"golang.org/x/sys/unix"
)

// mountTmpfs mounts a tmpfs of size bytes on a temporary directory.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
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
	cfg := loadYAML(t, `
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
	pkts := readTrace(t, path) // fails the test on a truncated record
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
	cfg := loadYAML(t, `
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
	if n := len(countScripted(readTrace(t, other))); n != 40000 {
		t.Errorf("the other sink holds %d scripted packets, want 40000; stats %+v %+v", n, res.Stats.BufferStats, res.Stats.Tracepipe)
	}
	pkts := readTrace(t, full)
	tp := lastStats(t, pkts).Tracepipe
	if !isTraceStats(pkts[len(pkts)-1]) || tp.SinkPacketsWritten != uint64(len(pkts)) || tp.SinkPacketsDropped == 0 {
		t.Errorf("full file: %d packets, last TraceStats written %d dropped %d", len(pkts), tp.SinkPacketsWritten, tp.SinkPacketsDropped)
	}
}
