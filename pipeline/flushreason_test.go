package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/tracefile"
)

// flushMarks is an in-process test data source implementing
// plugins.FlagsFlusher: every flush writes a mark packet,
// for_testing = TestEvent{str: "flush:" + reason}, as the fault plugin's
// flush_marks mode does, and it runs until stopped.
type flushMarks struct {
	mu sync.Mutex
	w  plugins.PacketWriter
}

func init() {
	plugins.Register("test.flushmarks", func(map[string]any) (plugins.DataSource, error) { return &flushMarks{}, nil })
}

func flushMarkPacket(reason string) []byte {
	var ev []byte
	ev = protowire.AppendTag(ev, 1, protowire.BytesType)
	ev = protowire.AppendString(ev, "flush:"+reason)
	var p []byte
	p = protowire.AppendTag(p, tracefile.FieldTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, uint64(bootNanos()))
	p = protowire.AppendTag(p, tracefile.FieldForTesting, protowire.BytesType)
	return protowire.AppendBytes(p, ev)
}

func (f *flushMarks) Start(h plugins.Host) error {
	w, err := h.NewWriter()
	f.w = w
	return err
}

func (f *flushMarks) Flush() error { return f.FlushWithFlags(0) }

func (f *flushMarks) FlushWithFlags(flags plugins.FlushFlags) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.w.WritePacket(flushMarkPacket(flags.Reason().String())); err != nil {
		return err
	}
	return f.w.Flush()
}

func (f *flushMarks) ClearIncrementalState() {}
func (f *flushMarks) Stop() error            { return f.w.Flush() }

// flushMarksIn counts the flush marks of a trace by writer (the packet's
// sequence) and reason.
func flushMarksIn(t *testing.T, path string) map[uint32]map[string]int {
	t.Helper()
	out := map[uint32]map[string]int{}
	for _, p := range tracetest.ReadTrace(t, path) {
		ev, ok := bytesField(p.Raw, tracefile.FieldForTesting)
		if !ok {
			continue
		}
		str, ok := bytesField(ev, 1)
		if !ok || !strings.HasPrefix(string(str), "flush:") {
			continue
		}
		if out[p.Info.SequenceID] == nil {
			out[p.Info.SequenceID] = map[string]int{}
		}
		out[p.Info.SequenceID][strings.TrimPrefix(string(str), "flush:")]++
	}
	return out
}

// Data sources learn why they are flushed, with Perfetto's FlushFlags: a
// snapshot's flush says TRACE_CLONE, flush_period's PERIODIC and the
// session's last one TRACE_STOP, to an in-process data source (through
// plugins.FlagsFlusher) and to a plugin (FlushRequest.flags). The marks
// they write on each flush show it; the snapshot holds the TRACE_CLONE
// marks (its flush came before its clone) and never a TRACE_STOP one.
func TestFlushReasonReachesDataSources(t *testing.T) {
	dir := t.TempDir()
	live := filepath.Join(dir, "live.pftrace")
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
flush_period: 100ms
buffers: [{size_kb: 1024, fill_policy: ring_buffer}]
data_sources:
  - name: test.flushmarks
  - name: fault.source
    plugin: %q
    config: {mode: flush_marks, packets: 10}
sinks: [{type: file, path: %q}]
`, faultPlugin(t), live))
	s, stop := startSession(t, cfg, Options{Logger: testsupport.Logger(t)})
	testsupport.WaitUntil(t, "periodic flushes", 30*time.Second, func() bool { return s.Status().Stats.FlushesSucceeded >= 2 })
	r := <-s.Snapshot(SnapshotRequest{Trigger: "reason"})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	stop()
	snap := flushMarksIn(t, r.Files[0])
	all := flushMarksIn(t, live)
	if len(all) != 2 {
		t.Fatalf("live trace: flush marks of %d writers, want 2 (in-process and plugin): %v", len(all), all)
	}
	for seq, reasons := range all {
		if reasons["PERIODIC"] == 0 || reasons["TRACE_CLONE"] != 1 || reasons["TRACE_STOP"] != 1 || reasons["UNKNOWN"] != 0 {
			t.Errorf("live trace, sequence %d: flush reasons %v; want PERIODIC, one TRACE_CLONE, one TRACE_STOP", seq, reasons)
		}
		if snap[seq]["TRACE_CLONE"] != 1 || snap[seq]["TRACE_STOP"] != 0 {
			t.Errorf("snapshot, sequence %d: flush reasons %v; want its TRACE_CLONE mark", seq, snap[seq])
		}
	}
}

// FlushFlags encode as Perfetto's flush_flags.h does (an ABI) and read
// unknown values as UNKNOWN.
func TestFlushFlagsEncoding(t *testing.T) {
	f := plugins.NewFlushFlags(plugins.FlushReasonTraceClone, plugins.FlushInitiatorTraced, plugins.FlushCloneTargetBugreport)
	if f != 0x113 {
		t.Fatalf("TRACE_CLONE|TRACED|BUGREPORT = %#x, want 0x113", uint64(f))
	}
	if f.Reason() != plugins.FlushReasonTraceClone || f.Initiator() != plugins.FlushInitiatorTraced || f.CloneTarget() != plugins.FlushCloneTargetBugreport {
		t.Fatalf("decoded %v", f)
	}
	if u := plugins.FlushFlags(0xfff); u.Reason() != plugins.FlushReasonUnknown || u.Initiator() != plugins.FlushInitiatorUnknown || u.CloneTarget() != plugins.FlushCloneTargetUnknown {
		t.Fatalf("unknown values decode as %v", u)
	}
}
