package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// stuckForever is a sink type whose destination never answers: Write
// blocks until the test ends.
type stuckForever struct {
	release <-chan struct{}
	mu      sync.Mutex
	st      sinks.SinkStats
}

func (s *stuckForever) Write(_ context.Context, p [][]byte) error {
	<-s.release
	s.mu.Lock()
	s.st.PacketsWritten += uint64(len(p))
	s.mu.Unlock()
	return nil
}
func (s *stuckForever) Flush(context.Context) error { return nil }
func (s *stuckForever) Close(context.Context) error { return nil }
func (s *stuckForever) Stats() sinks.SinkStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

type stuckBuilder struct{}

// stuckRelease is what the next opened test.stuck sink waits on.
var stuckRelease chan struct{}

func (stuckBuilder) Destination() string { return "nowhere" }
func (stuckBuilder) Open(sinks.Env) (sinks.Sink, error) {
	return &stuckForever{release: stuckRelease}, nil
}

func init() {
	// A registered type like any other: the registry is how tests and the
	// network sinks add destinations.
	sinks.Register("test.stuck", func(m map[string]any) (sinks.Builder, error) {
		sec := sinks.NewSection(m)
		if err := sec.Err(); err != nil {
			return nil, err
		}
		return stuckBuilder{}, nil
	})
}

// countScripted counts each scripted (writer, index) in a trace.
func countScripted(pkts []tracetest.Packet) map[[2]int]int {
	seen := map[[2]int]int{}
	for _, p := range pkts {
		if w, i, _, ok := tracetest.ScriptedID(p.Raw); ok {
			seen[[2]int{w, i}]++
		}
	}
	return seen
}

// A sink whose destination blocks forever (when_full: drop): the file
// sink's output is complete, the blocked sink's drops are counted, the
// session stops within its stop bound, and the summary names both.
//
// It runs on synctest's clock, so the stop bound is exact: the sinks'
// close bound (sinkCloseTime, for the blocked lane to take the last
// batches) and the lanes' close bound after it, nothing more.
func TestServiceBlockedSinkDoesNotDelayFileSink(t *testing.T) {
	synctest.Test(t, testServiceBlockedSinkDoesNotDelayFileSink)
}

func testServiceBlockedSinkDoesNotDelayFileSink(t *testing.T) {
	stuckRelease = make(chan struct{})
	old := sinkCloseTime
	sinkCloseTime = 2 * time.Second
	defer func() { sinkCloseTime = old }()
	dir := t.TempDir()
	path := filepath.Join(dir, "t.pftrace")
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 4096}]
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 2, packets: 3000, sizes: [200]}
sinks:
  - type: file
    file: {path: `+path+`}
  - type: test.stuck
    name: stuck
    when_full: drop
    queue_capacity: 2
    test.stuck: {}
`)
	s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	res, err := s.Run(ctx)
	stopped := time.Since(start)
	close(stuckRelease)
	if err == nil {
		t.Log("close of the stuck sink reported no error")
	}
	if res == nil {
		t.Fatal(err)
	}
	pkts := tracetest.ReadTrace(t, path)
	seen := countScripted(pkts)
	if len(seen) != 6000 {
		t.Errorf("file holds %d distinct scripted packets, want 6000; losses %+v %+v", len(seen), res.Stats.Tracepipe, res.Stats.BufferStats)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("packet %v written %d times", k, n)
		}
	}
	ts := lastStats(t, pkts)
	if got := ts.Tracepipe.SinkPacketsWritten; got != uint64(len(pkts)) {
		t.Errorf("file's last TraceStats says %d packets written, the file holds %d", got, len(pkts))
	}
	if len(res.Sinks) != 2 || res.Sinks[0].Destination != path || res.Sinks[1].Destination != "nowhere" || res.Sinks[1].Name != "stuck" {
		t.Fatalf("sink results %+v", res.Sinks)
	}
	st := res.Sinks[1].Stats
	if st.PacketsDroppedQueue == 0 {
		t.Errorf("the stuck sink dropped nothing: %+v", st)
	}
	if f := res.Sinks[0].Stats; f.PacketsWritten != uint64(len(pkts)) || f.PacketsDropped() != 0 {
		t.Errorf("file sink result %+v, file holds %d packets", f, len(pkts))
	}
	// Stop bound: the blocked lane's bound for the last batches, then
	// one close bound for all lanes (they close together).
	t.Logf("the session took %v of synctest's clock", stopped)
	if stopped > 2*sinkCloseTime {
		t.Errorf("the session took %v with a stuck sink, more than 2×sinkCloseTime", stopped)
	}
}

// Each sink's TraceStats carries its own counters: with two file sinks,
// one filtered, every file's last TraceStats counts exactly the packets
// in that file, and the filtered one counts what its filter removed.
func TestServicePerSinkTraceStats(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.pftrace"), filepath.Join(dir, "b.pftrace.zst")
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
stats_period: 1s
buffers: [{size_kb: 4096}]
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 2, packets: 2000, sizes: [100, 300]}
sinks:
  - {type: file, path: `+a+`}
  - type: file
    filter: 'packet.sequence_id != 2'
    file: {path: `+b+`}
`)
	res := runSession(t, cfg)
	var filtered uint64
	for i, path := range []string{a, b} {
		pkts := tracetest.ReadTrace(t, path)
		ts := lastStats(t, pkts)
		if !isTraceStats(pkts[len(pkts)-1]) {
			t.Errorf("%s does not end with a TraceStats", path)
		}
		tp := ts.Tracepipe
		if tp.SinkPacketsWritten != uint64(len(pkts)) {
			t.Errorf("%s: last TraceStats says %d packets written, the file holds %d", path, tp.SinkPacketsWritten, len(pkts))
		}
		if r := res.Sinks[i].Stats; r.PacketsWritten != uint64(len(pkts)) {
			t.Errorf("%s: result says %d written, file holds %d", path, r.PacketsWritten, len(pkts))
		}
		if i == 1 {
			filtered = tp.SinkPacketsFiltered
		} else if tp.SinkPacketsFiltered != 0 {
			t.Errorf("unfiltered sink counts %d filtered", tp.SinkPacketsFiltered)
		}
	}
	if filtered == 0 || filtered != res.Sinks[1].Stats.PacketsFiltered {
		t.Errorf("filtered sink: TraceStats %d, result %d", filtered, res.Sinks[1].Stats.PacketsFiltered)
	}
}

func isTraceStats(p tracetest.Packet) bool { return p.Info.PayloadField == tracefile.FieldTraceStats }

// Rotation makes self-contained files: every file after the first starts
// with the clock snapshot and trace_config, every file but the last ends
// with a TraceStats whose sink_packets_written counts the packets of the
// files so far, none reaches max_file_size, and the set holds every
// scripted packet exactly once.
func TestServiceRotationSelfContained(t *testing.T) {
	// (Compressed rotation by bytes on disk: sinks.TestFileSinkCompression.)
	for _, name := range []string{"t.pftrace"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), name)
			cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 8192}]
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 3, packets: 4000, sizes: [300, 700]}
sinks:
  - type: file
    file: {path: `+path+`, max_file_size: 1MiB}
`)
			res := runSession(t, cfg)
			files := res.Sinks[0].Files
			if len(files) < 3 {
				t.Fatalf("%d files, want a rotation (%v)", len(files), files)
			}
			seen := map[[2]int]int{}
			var total uint64
			for i, f := range files {
				pkts := tracetest.ReadTrace(t, f)
				total += uint64(len(pkts))
				if st, err := os.Stat(f); err != nil || st.Size() >= 1<<20 {
					t.Errorf("%s: %v bytes, cap 1 MiB (%v)", f, st.Size(), err)
				}
				if i > 0 {
					if pkts[0].Info.PayloadField != tracefile.FieldClockSnapshot {
						t.Errorf("%s starts with %s, want the clock snapshot", f, pkts[0].Info.Kind())
					}
					if pkts[1].Info.PayloadField != tracefile.FieldTraceConfig {
						t.Errorf("%s: packet 1 is %s, want trace_config", f, pkts[1].Info.Kind())
					}
				}
				if !isTraceStats(pkts[len(pkts)-1]) {
					t.Fatalf("%s does not end with a TraceStats", f)
				}
				if ts := lastStats(t, pkts); ts.Tracepipe.SinkPacketsWritten != total {
					t.Errorf("%s: last TraceStats counts %d written, the files so far hold %d", f, ts.Tracepipe.SinkPacketsWritten, total)
				}
				for k, n := range countScripted(pkts) {
					seen[k] += n
				}
			}
			if len(seen) != 12000 {
				t.Errorf("the set holds %d distinct scripted packets, want 12000", len(seen))
			}
			for k, n := range seen {
				if n != 1 {
					t.Fatalf("packet %v is in the set %d times", k, n)
				}
			}
		})
	}
}

// The user reports: `packet.kind == "process_tree"` also dropped the clock
// snapshot and trace_config (an unreadable file), and a filter's runtime
// error silently kept every packet. Service packets pass every filter; a
// runtime error follows filter_error (drop by default) and is counted in
// the sink's own sink_filter_errors.
func TestServiceFiltersKeepServicePacketsAndCountErrors(t *testing.T) {
	dir := t.TempDir()
	kindOnly, divDrop, divKeep := filepath.Join(dir, "kind.pftrace"), filepath.Join(dir, "div.pftrace"), filepath.Join(dir, "keep.pftrace")
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 4096}]
data_sources:
  - name: test.scripted
    config: {writers: 1, packets: 500, sizes: [100]}
sinks:
  - {type: file, path: `+kindOnly+`, filter: 'packet.kind == "process_tree"'}
  - {type: file, path: `+divDrop+`, filter: 'packet.size / (packet.sequence_id - 2) > 0'}
  - {type: file, path: `+divKeep+`, filter: 'packet.size / (packet.sequence_id - 2) > 0', filter_error: keep}
`)
	runSession(t, cfg)
	for _, c := range []struct {
		path      string
		scripted  int
		errorsMin uint64
	}{{kindOnly, 0, 0}, {divDrop, 0, 500}, {divKeep, 500, 500}} {
		pkts := tracetest.ReadTrace(t, c.path)
		kinds := map[int32]bool{}
		for _, p := range pkts {
			kinds[p.Info.PayloadField] = true
		}
		for _, k := range []int32{tracefile.FieldClockSnapshot, tracefile.FieldTraceConfig, tracefile.FieldSystemInfo, tracefile.FieldTraceStats} {
			if !kinds[k] {
				t.Errorf("%s: no %s packet: the filter removed a service packet", c.path, tracefile.PacketFieldName(k))
			}
		}
		if n := len(countScripted(pkts)); n != c.scripted {
			t.Errorf("%s: %d scripted packets, want %d", c.path, n, c.scripted)
		}
		tp := lastStats(t, pkts).Tracepipe
		if tp.SinkFilterErrors < c.errorsMin || (c.errorsMin == 0 && tp.SinkFilterErrors != 0) {
			t.Errorf("%s: sink_filter_errors %d, want >= %d", c.path, tp.SinkFilterErrors, c.errorsMin)
		}
		if tp.SinkPacketsWritten != uint64(len(pkts)) {
			t.Errorf("%s: written %d, file holds %d", c.path, tp.SinkPacketsWritten, len(pkts))
		}
	}
}

// Each rotated file of a synthetic session resolves its own interned
// names: per sequence, in file order, every TrackEvent name_iid is defined
// by interned_data since the sequence's last CLEARED in that file (the
// restore packet at its head supplies what earlier files defined). This
// models trace_processor's rule (trace-processor-import.md §2).
func TestServiceRotatedFilesResolveInternedNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.pftrace")
	cfg := cfgtest.LoadYAML(t, `
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 16384}]
producers: {smb_size_kb: 4096}
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: 2, max_packets: 12000, packet_size: 300, names: 64}
sinks: [{type: file, path: `+path+`, max_file_size: 1MiB}]
`)
	res := runSession(t, cfg)
	if len(res.Files) < 3 {
		t.Fatalf("%d files: no rotation", len(res.Files))
	}
	for _, f := range res.Files {
		defined := map[uint32]map[uint64]bool{}
		var used int
		for i, p := range tracetest.ReadTrace(t, f) {
			seq := p.Info.SequenceID
			if p.Info.SequenceFlags&1 != 0 { // CLEARED: a new generation
				defined[seq] = map[uint64]bool{}
			}
			for _, in := range lenFields(p.Raw, tracefile.FieldInternedData) {
				for _, name := range lenFields(in, 2) { // event_names
					if defined[seq] == nil {
						continue // interned data on a sequence not yet valid: dropped by trace_processor
					}
					for _, iid := range varintsOf(name, 1) {
						defined[seq][iid] = true
					}
				}
			}
			for _, te := range lenFields(p.Raw, tracefile.FieldTrackEvent) {
				for _, iid := range varintsOf(te, 10) { // name_iid
					used++
					if !defined[seq][iid] {
						t.Fatalf("%s: packet %d (sequence %d) uses name iid %d that this file does not define", f, i, seq, iid)
					}
				}
			}
		}
		if used == 0 {
			t.Errorf("%s: no interned name used", f)
		}
	}
}

// lenFields returns the payloads of the length-delimited fields num of b.
func lenFields(b []byte, num protowire.Number) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return out
		}
		m := protowire.ConsumeFieldValue(n, typ, b[l:])
		if m < 0 {
			return out
		}
		if n == num && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[l:])
			out = append(out, v)
		}
		b = b[l+m:]
	}
	return out
}

// varintsOf returns the varint fields num of b.
func varintsOf(b []byte, num protowire.Number) []uint64 {
	var out []uint64
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return out
		}
		m := protowire.ConsumeFieldValue(n, typ, b[l:])
		if m < 0 {
			return out
		}
		if n == num && typ == protowire.VarintType {
			v, _ := protowire.ConsumeVarint(b[l:])
			out = append(out, v)
		}
		b = b[l+m:]
	}
	return out
}

// The free list hands out the batch released last, so that sinks keeping
// up cycle through the same few batches (and their grown memory) instead
// of growing every batch in the list; take waits for a put.
func TestBatchPoolTakesLastReleased(t *testing.T) {
	p := newBatchPool(2)
	a, b := &batch{}, &batch{}
	p.put(a)
	p.put(b)
	if got := p.tryTake(); got != b {
		t.Fatalf("first take: got %p, want the batch put last (%p)", got, b)
	}
	if got := p.tryTake(); got != a {
		t.Fatalf("second take: got %p, want %p", got, a)
	}
	if got := p.tryTake(); got != nil {
		t.Fatalf("take from an empty pool: got %p, want nil", got)
	}
	got := make(chan *batch)
	go func() { got <- p.take() }()
	p.put(a)
	select {
	case g := <-got:
		if g != a {
			t.Fatalf("take: got %p, want %p", g, a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("take still waiting 10 s after a put")
	}
	if p.capacity() != 2 {
		t.Fatalf("capacity %d, want 2", p.capacity())
	}
}
