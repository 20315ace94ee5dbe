package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// stateScripts are packet streams for the test.state data source: packet
// i of writer w. Packet 0 sets up the state the rest refer to; a ring
// small enough to wrap overwrites it.
var stateScripts = map[string]func(w, i int) []byte{
	// Interned names: packet 0 clears and interns names 1..8 and a
	// category; every later packet is a SLICE_BEGIN (NEEDS) using name
	// i%8+1 on the writer's track.
	"interned": func(w, i int) []byte {
		var p []byte
		p = appendVarint(p, tracefile.FieldTimestamp, uint64(1000+i))
		if i == 0 {
			p = appendVarint(p, tracefile.FieldSequenceFlags, tracefile.SeqIncrementalStateCleared)
			var id []byte
			for iid := 1; iid <= 8; iid++ {
				id = appendMessage(id, 2, appendString(appendVarint(nil, 1, uint64(iid)), 2, fmt.Sprintf("w%d_name_%d", w, iid)))
			}
			id = appendMessage(id, 1, appendString(appendVarint(nil, 1, 1), 2, "cat"))
			return appendMessage(p, tracefile.FieldInternedData, id)
		}
		p = appendVarint(p, tracefile.FieldSequenceFlags, tracefile.SeqNeedsIncrementalState)
		ev := appendVarint(nil, 9, 1) // SLICE_BEGIN
		ev = appendVarint(ev, 11, uint64(100+w))
		ev = appendVarint(ev, 10, uint64(i%8+1))
		ev = appendVarint(ev, 3, 1) // category_iids
		return appendMessage(p, tracefile.FieldTrackEvent, padEvent(ev))
	},
	// Counter track: packet 0 declares counter track 200+w; every later
	// packet is a COUNTER event with value i on it (no incremental state).
	"counter": func(w, i int) []byte {
		p := appendVarint(nil, tracefile.FieldTimestamp, uint64(1000+i))
		if i == 0 {
			td := appendVarint(nil, 1, uint64(200+w))
			td = appendString(td, 2, fmt.Sprintf("counter %d", w))
			td = appendMessage(td, 8, nil) // counter {}
			return appendMessage(p, tracefile.FieldTrackDescriptor, td)
		}
		ev := appendVarint(nil, 9, 4) // COUNTER
		ev = appendVarint(ev, 11, uint64(200+w))
		ev = appendVarint(ev, 30, uint64(i))
		return appendMessage(p, tracefile.FieldTrackEvent, padEvent(ev))
	},
	// Processes: packet 0 is a process tree (process 1000+w, its thread
	// 2000+w); every later packet is a TestEvent naming thread 2000+w.
	"process": func(w, i int) []byte {
		p := appendVarint(nil, tracefile.FieldTimestamp, uint64(1000+i))
		if i == 0 {
			pt := appendMessage(nil, 1, appendString(appendVarint(appendVarint(nil, 1, uint64(1000+w)), 2, 1), 3, "proc"))
			pt = appendMessage(pt, 2, appendVarint(appendVarint(nil, 1, uint64(2000+w)), 3, uint64(1000+w)))
			return appendMessage(p, tracefile.FieldProcessTree, pt)
		}
		te := appendString(nil, 1, strings.Repeat("x", 150)) // TestEvent.str
		te = appendVarint(te, 2, uint64(2000+w))             // seq_value: the thread
		return appendMessage(p, tracefile.FieldForTesting, te)
	},
}

// padEvent adds a debug annotation {name "pad", string_value} so that
// packets are ~200 bytes and a small ring wraps quickly.
func padEvent(ev []byte) []byte {
	return appendMessage(ev, 4, appendString(appendString(nil, 10, "pad"), 6, strings.Repeat("p", 160)))
}

// stateSource is the test.state data source: writers goroutines each
// write packets packets of the script named by config key script.
type stateSource struct {
	script           func(w, i int) []byte
	writers, packets int
	done             chan struct{}
	errs             chan error
}

func init() {
	plugins.Register("test.state", func(cfg map[string]any) (plugins.DataSource, error) {
		s := &stateSource{writers: 1, packets: 100, done: make(chan struct{}), errs: make(chan error, 16)}
		for k, v := range cfg {
			switch k {
			case "script":
				s.script = stateScripts[v.(string)]
				if s.script == nil {
					return nil, fmt.Errorf("script: unknown %q", v)
				}
			case "writers":
				s.writers = v.(int)
			case "packets":
				s.packets = v.(int)
			default:
				return nil, fmt.Errorf("%s: unknown key", k)
			}
		}
		if s.script == nil {
			return nil, fmt.Errorf("script: required")
		}
		return s, nil
	})
}

func (s *stateSource) Start(h plugins.Host) error {
	var pws []plugins.PacketWriter
	for range s.writers {
		pw, err := h.NewWriter()
		if err != nil {
			return err
		}
		pws = append(pws, pw)
	}
	var wg sync.WaitGroup
	for w, pw := range pws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < s.packets; i++ {
				if err := pw.WritePacket(s.script(w, i)); err != nil {
					s.errs <- err
					return
				}
			}
			if err := pw.Flush(); err != nil {
				s.errs <- err
			}
		}()
	}
	go func() { wg.Wait(); close(s.done) }()
	return nil
}

func (s *stateSource) Flush() error           { <-s.done; return nil }
func (s *stateSource) ClearIncrementalState() {}
func (s *stateSource) Stop() error            { <-s.done; return nil }
func (s *stateSource) Done() <-chan struct{}  { return s.done }

// runStateScript runs script through a 64 KiB ring (2 writers, 1500
// packets each: the ring wraps several times) with program (a path under
// configs/protovm, "" for none) and returns the trace and the TP model
// fed with it.
func runStateScript(t *testing.T, script, program string, streaming bool) ([]tracetest.Packet, *tpModel, *Result) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "trace.pftrace")
	vm := ""
	if program != "" {
		abs, err := filepath.Abs(filepath.Join("../configs/protovm", program))
		if err != nil {
			t.Fatal(err)
		}
		vm = fmt.Sprintf("    protovm: {program: %q, memory_limit_kb: 256}\n", abs)
	}
	mode := "write_into_file: false\n"
	if streaming {
		mode = "write_into_file: true\nfile_write_period: 100ms\n"
	}
	res := runSession(t, cfgtest.LoadYAML(t, fmt.Sprintf(`%sbuffers: [{size_kb: 64, fill_policy: ring_buffer}]
data_sources:
  - name: test.state
    buffer_exhausted_policy: stall
    config: {script: %s, writers: 2, packets: 1500}
%ssinks: [{type: file, path: %q}]
`, mode, script, vm, out)))
	if st := res.Stats.BufferStats[0]; st.WriteWrapCount < 3 || st.ChunksOverwritten == 0 {
		t.Fatalf("the ring wrapped %d times (%d chunks overwritten): the test proves nothing", st.WriteWrapCount, st.ChunksOverwritten)
	}
	pkts := tracetest.ReadTrace(t, out)
	m := newTPModel()
	for _, p := range pkts {
		m.packet(t, p.Raw)
	}
	// The project's oracle (`tracepipe check`) must agree with the model
	// on what is skipped, unresolved and dropped.
	rep, err := tpimport.CheckFile(out, tpimport.Options{ClockSlackNs: -1})
	if err != nil {
		t.Fatal(err)
	}
	var skipped, unresolved, dropped int64
	for _, q := range rep.Sequences {
		skipped += q.NeedsSkipped
		dropped += q.Dropped
		for _, n := range q.Unresolved {
			unresolved += n
		}
	}
	if skipped != int64(m.totalSkipped()) || (m.unresolved == 0) != (unresolved == 0) || (m.counterInvalid == 0) != (dropped == 0) {
		t.Fatalf("tracepipe check: %d skipped, %d unresolved, %d dropped; model: %d skipped, %d unresolved, %d counters dropped",
			skipped, unresolved, dropped, m.totalSkipped(), m.unresolved, m.counterInvalid)
	}
	return pkts, m, res
}

// danglingNames counts name_iid references with no definition on their
// sequence since its last CLEARED packet, in file order, whatever the
// sequence's validity.
func danglingNames(t *testing.T, pkts []tracetest.Packet) (refs, dangling int) {
	defined := map[uint32]map[uint64]bool{}
	for _, p := range pkts {
		seq := p.Info.SequenceID
		if p.Info.SequenceFlags&tracefile.SeqIncrementalStateCleared != 0 || defined[seq] == nil {
			defined[seq] = map[uint64]bool{}
		}
		for _, iid := range internedNames(t, p.Raw) {
			defined[seq][iid] = true
		}
		if iid, ok := referencedName(t, p.Raw); ok {
			refs++
			if !defined[seq][iid] {
				dangling++
			}
		}
	}
	return refs, dangling
}

// dataSequences counts the producer sequences (id ≥ 2) in a trace.
func dataSequences(pkts []tracetest.Packet) int {
	seen := map[uint32]bool{}
	for _, p := range pkts {
		if p.Info.SequenceID >= 2 {
			seen[p.Info.SequenceID] = true
		}
	}
	return len(seen)
}

func TestRestoreLibraryInternedData(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			pkts, m, _ := runStateScript(t, "interned", "", streaming)
			refs, dangling := danglingNames(t, pkts)
			// In streaming mode the clearing packet may have been read
			// before the wrap: the names are then defined but the loss
			// invalidates the sequence, so trace_processor skips instead.
			if m.totalSkipped() == 0 || (!streaming && dangling == 0) {
				t.Fatalf("without program: %d of %d references dangle, %d packets skipped; want skips (and, read at stop, dangling names)", dangling, refs, m.totalSkipped())
			}
			pkts, m, res := runStateScript(t, "interned", "interned_data.yaml", streaming)
			refs, dangling = danglingNames(t, pkts)
			if refs == 0 || dangling != 0 || m.totalSkipped() != 0 || m.unresolved != 0 || m.names != refs {
				t.Fatalf("with program: %d of %d references dangle, %d skipped, %d unresolved, %d resolved", dangling, refs, m.totalSkipped(), m.unresolved, m.names)
			}
			if n := dataSequences(pkts); res.Stats.Tracepipe.SequenceRestores < uint64(n) {
				t.Fatalf("%d restores for %d wrapped sequences", res.Stats.Tracepipe.SequenceRestores, n)
			}
			t.Logf("with program: %d references resolve, %d restore packets", refs, res.Stats.Tracepipe.SequenceRestores)
		})
	}
}

func TestRestoreLibraryTrackDescriptors(t *testing.T) {
	_, m, _ := runStateScript(t, "counter", "", false)
	if m.counterInvalid == 0 {
		t.Fatalf("without program: every counter event found its track (%d imported)", m.counters)
	}
	_, m, _ = runStateScript(t, "counter", "track_descriptors.yaml", false)
	if m.counterInvalid != 0 || m.counters == 0 {
		t.Fatalf("with program: %d counter events without a track before them, %d imported, tracks %v", m.counterInvalid, m.counters, m.counterTracks)
	}
}

func TestRestoreLibraryCounterValues(t *testing.T) {
	// Without the program the first value of each track is the first
	// survivor's; with it a restored event at the survivor's timestamp
	// carries the last overwritten value (values count up by one).
	_, m, _ := runStateScript(t, "counter", "track_descriptors.yaml", false)
	first := map[uint64]uint64{}
	for uuid, vals := range m.counterValues {
		first[uuid] = vals[0]
		for k := 1; k < len(vals); k++ {
			if vals[k] != vals[k-1]+1 {
				t.Fatalf("track %d: values %d then %d without the program", uuid, vals[k-1], vals[k])
			}
		}
	}
	if len(first) == 0 {
		t.Fatal("no counter imported without the program")
	}
	pkts, m, _ := runStateScript(t, "counter", "counter_values.yaml", false)
	if m.counterInvalid != 0 {
		t.Fatalf("%d counter events before their track descriptor", m.counterInvalid)
	}
	// The restored value is the last overwritten one: the survivor's
	// predecessor, or the one before when the packet straddling the
	// overwritten chunk boundary was lost whole (its first fragment
	// overwritten, its continuation unreadable).
	for uuid, vals := range m.counterValues {
		if len(vals) < 2 || vals[0] >= vals[1] || vals[1]-vals[0] > 2 {
			t.Fatalf("track %d: first values %v; want the last overwritten value, then the first survivor's", uuid, vals[:min(len(vals), 3)])
		}
	}
	// The restored event carries the survivor's timestamp.
	for i, p := range pkts {
		if p.Info.SequenceFlags&tracefile.SeqIncrementalStateCleared == 0 || p.Info.SequenceID < 2 {
			continue
		}
		var evs []tracetest.Packet // the restored counter event, then the survivor
		for _, q := range pkts[i+1:] {
			if q.Info.PayloadField == tracefile.FieldTrackEvent && len(evs) < 2 {
				evs = append(evs, q)
			}
		}
		if len(evs) != 2 || !evs[0].Info.HasTimestamp || evs[0].Info.Timestamp != evs[1].Info.Timestamp {
			t.Fatalf("restore at packet %d: the restored counter and the survivor do not share a timestamp", i)
		}
	}
}

func TestRestoreLibraryProcessThreads(t *testing.T) {
	_, m, _ := runStateScript(t, "process", "", false)
	if len(m.threads) != 0 {
		t.Fatalf("without program the process tree survived: %v", m.threads)
	}
	pkts, m, res := runStateScript(t, "process", "process_threads.yaml", false)
	// Every thread a surviving TestEvent names resolves to its process.
	refs := 0
	for _, p := range pkts {
		if p.Info.PayloadField != tracefile.FieldForTesting {
			continue
		}
		testsupport.Fields(t, p.Info.Payload, func(num protowire.Number, v uint64, _ []byte) {
			if num != 2 {
				return
			}
			refs++
			if got := m.threads[int64(v)]; got != int64(v)-1000 {
				t.Fatalf("thread %d → process %d; want %d (threads %v)", v, got, v-1000, m.threads)
			}
		})
	}
	if refs == 0 || res.Stats.Tracepipe.SequenceRestores != uint64(dataSequences(pkts)) {
		t.Fatalf("%d thread references, %d restores for %d sequences", refs, res.Stats.Tracepipe.SequenceRestores, dataSequences(pkts))
	}
}
