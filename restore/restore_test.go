package restore

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tracefile"
)

// newTestRestoreSet gives producer 1 the interned_data.yaml program.
func newTestRestoreSet(t *testing.T) *Set {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "configs", "protovm", "interned_data.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := protovm.Compile(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := NewSet()
	r.programs[1] = NewProgram(prog, 64<<10)
	if !r.programs[1].filtered {
		t.Fatal("interned_data.yaml cannot be prefiltered")
	}
	return r
}

// namesPacket is a producer packet interning event names iid → name.
func namesPacket(flags uint64, names map[uint64]string) []byte {
	var id []byte
	for _, iid := range slices.Sorted(maps.Keys(names)) {
		id = wire.AppendBytes(id, 2, wire.AppendString(wire.AppendVarint(nil, 1, iid), 2, names[iid]))
	}
	p := wire.AppendVarint(nil, tracefile.FieldTimestamp, 5)
	if flags != 0 {
		p = wire.AppendVarint(p, tracefile.FieldSequenceFlags, flags)
	}
	return wire.AppendBytes(p, tracefile.FieldInternedData, id)
}

// eventPacket is a NEEDS slice packet using name iid.
func eventPacket(iid uint64) []byte {
	p := wire.AppendVarint(nil, tracefile.FieldTimestamp, 7)
	p = wire.AppendVarint(p, tracefile.FieldSequenceFlags, tracefile.SeqNeedsIncrementalState)
	return wire.AppendBytes(p, tracefile.FieldTrackEvent, wire.AppendVarint(wire.AppendVarint(nil, 9, 1), 10, iid))
}

// readBack runs the readback's restore step for one packet of (1, writer)
// and returns the packets it put into the batch.
func readBack(t *testing.T, r *Set, writer uint16, pkt []byte, loss uint32) []tracetest.Packet {
	t.Helper()
	var b batch
	q := r.Seq(1, writer)
	if q == nil {
		t.Fatal("no fold for producer 1")
	}
	b.data = append(b.data, pkt...)
	tr := r.restoreAhead(&b, q, 0, tracefile.Trusted{SequenceID: uint32(10 + writer), PreviousPacketDropped: loss})
	b.data = tracefile.AppendTrusted(b.data, tr)
	b.ends = append(b.ends, len(b.data))
	var out []tracetest.Packet
	start := 0
	for _, e := range b.ends {
		info, err := tracefile.DecodePacket(b.data[start:e])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tracetest.Packet{Raw: b.data[start:e], Info: info})
		start = e
	}
	return out
}

func eventNames(t *testing.T, pkt []byte) map[uint64]string {
	out := map[uint64]string{}
	testsupport.Fields(t, pkt, func(num protowire.Number, _ uint64, p []byte) {
		if num != tracefile.FieldInternedData {
			return
		}
		testsupport.Fields(t, p, func(num protowire.Number, _ uint64, e []byte) {
			if num != 2 {
				return
			}
			var iid uint64
			var name string
			testsupport.Fields(t, e, func(num protowire.Number, v uint64, s []byte) {
				if num == 1 {
					iid = v
				} else if num == 2 {
					name = string(s)
				}
			})
			out[iid] = name
		})
	})
	return out
}

func overwrite(r *Set, writer uint16, pkt []byte) {
	r.Observe(buffer.SequenceProperties{ProducerID: 1, WriterID: writer}, [][]byte{pkt[:3], pkt[3:]})
}

// Two writers of one data source intern iid 1 with different names: each
// sequence's restore carries its own writer's definitions. One fold per
// (data source, program), as protovm.Instances keeps for Perfetto, would
// give one of them the other's names.
func TestRestorePerSequence(t *testing.T) {
	r := newTestRestoreSet(t)
	overwrite(r, 1, namesPacket(1, map[uint64]string{1: "alpha", 2: "beta"}))
	overwrite(r, 2, namesPacket(1, map[uint64]string{1: "uno"}))
	for w, want := range map[uint16]map[uint64]string{1: {1: "alpha", 2: "beta"}, 2: {1: "uno"}} {
		out := readBack(t, r, w, eventPacket(1), tracefile.LossPresent|tracefile.LossOverwrite)
		if len(out) != 2 {
			t.Fatalf("writer %d: %d packets, want restore + survivor", w, len(out))
		}
		rs, surv := out[0].Info, out[1].Info
		if rs.SequenceFlags != tracefile.SeqIncrementalStateCleared || rs.SequenceID != uint32(10+w) || rs.PreviousPacketDropped != 65 || rs.HasTimestamp {
			t.Errorf("writer %d restore %+v", w, rs)
		}
		if surv.PreviousPacketDropped != 0 || surv.SequenceID != uint32(10+w) || surv.Kind() != "track_event" {
			t.Errorf("writer %d survivor %+v", w, surv)
		}
		if got := eventNames(t, out[0].Raw); !namesEqual(got, want) {
			t.Errorf("writer %d restore names %v, want %v", w, got, want)
		}
	}
	if r.restores != 2 || r.foldAborted != 0 {
		t.Fatalf("restores %d, folds aborted %d", r.restores, r.foldAborted)
	}
}

func namesEqual(a, b map[uint64]string) bool { return maps.Equal(a, b) }

// The fold restarts at CLEARED (trace_processor drops interned data
// there), includes packets read back earlier (streaming: a later wrap must
// restore what an earlier pass wrote out), and a survivor that clears the
// state itself needs no restore and keeps its loss flag (CLEARED on the
// same packet wins, reference §1).
func TestRestoreFoldRules(t *testing.T) {
	r := newTestRestoreSet(t)
	overwrite(r, 1, namesPacket(1, map[uint64]string{1: "old", 9: "gone"}))
	overwrite(r, 1, namesPacket(1, map[uint64]string{1: "new"})) // a new generation
	// First read pass: the first survivor gets a restore; the next
	// packet, defining name 2, is read without one.
	if out := readBack(t, r, 1, eventPacket(1), 65); len(out) != 2 || !namesEqual(eventNames(t, out[0].Raw), map[uint64]string{1: "new"}) {
		t.Fatalf("first restore: %d packets", len(out))
	}
	if out := readBack(t, r, 1, namesPacket(0, map[uint64]string{2: "read"}), 0); len(out) != 1 {
		t.Fatalf("packet without loss got %d packets", len(out))
	}
	// Overwrites between passes, then the next pass's first packet.
	overwrite(r, 1, eventPacket(2))
	out := readBack(t, r, 1, eventPacket(2), 65)
	if len(out) != 2 || !namesEqual(eventNames(t, out[0].Raw), map[uint64]string{1: "new", 2: "read"}) {
		t.Fatalf("second restore lacks the name read in the earlier pass: %v", eventNames(t, out[0].Raw))
	}
	// A survivor that clears: no restore, its loss flag stays.
	overwrite(r, 1, eventPacket(2))
	out = readBack(t, r, 1, namesPacket(1, map[uint64]string{3: "fresh"}), 65)
	if len(out) != 1 || out[0].Info.PreviousPacketDropped != 65 {
		t.Fatalf("clearing survivor: %d packets, loss %d", len(out), out[0].Info.PreviousPacketDropped)
	}
	// …and the fold restarted with it.
	out = readBack(t, r, 1, eventPacket(3), 65)
	if !namesEqual(eventNames(t, out[0].Raw), map[uint64]string{3: "fresh"}) {
		t.Fatalf("fold did not restart at CLEARED: %v", eventNames(t, out[0].Raw))
	}
	// Producers without a program are not folded.
	if r.Seq(2, 1) != nil {
		t.Fatal("fold for a producer without program")
	}
}

// The readback's per-packet restore step (fold, no restore due) does not
// allocate in steady state: it runs for every packet of a restore
// sequence.
func TestRestoreStepNoAlloc(t *testing.T) {
	r := newTestRestoreSet(t)
	q := r.Seq(1, 1)
	var b batch
	ev := eventPacket(1)
	names := namesPacket(0, map[uint64]string{1: "a"})
	step := func(pkt []byte) {
		b.data = append(b.data[:0], pkt...)
		r.restoreAhead(&b, q, 0, tracefile.Trusted{SequenceID: 3})
	}
	step(namesPacket(1, map[uint64]string{1: "a"}))
	step(names)
	if n := testing.AllocsPerRun(200, func() { step(ev); step(names) }); n != 0 {
		t.Fatalf("%v allocations per step", n)
	}
}

func BenchmarkRestoreStep(b *testing.B) {
	t := &testing.T{}
	r := newTestRestoreSet(t)
	q := r.Seq(1, 1)
	var bt batch
	ev := eventPacket(1)
	bt.data = append(bt.data, namesPacket(1, map[uint64]string{1: "a"})...)
	r.restoreAhead(&bt, q, 0, tracefile.Trusted{SequenceID: 3})
	b.SetBytes(int64(len(ev)))
	b.ReportAllocs()
	for b.Loop() {
		bt.data = append(bt.data[:0], ev...)
		r.restoreAhead(&bt, q, 0, tracefile.Trusted{SequenceID: 3})
	}
}

// FuzzRestore feeds a sequence's fold untrusted packets — overwritten ones
// are not validated — and reads others back: every packet the readback
// emits must decode, restores must clear and carry the loss, and nothing
// may panic. data is split into packets at each 0xff byte; a packet's
// first byte chooses overwrite (even) or read back with a loss (odd).
func FuzzRestore(f *testing.F) {
	f.Add(append(append([]byte{0}, namesPacket(1, map[uint64]string{1: "a"})...), append([]byte{0xff, 1}, eventPacket(1)...)...))
	f.Add([]byte{0, 0x62, 0x05, 0x01, 0xff, 1, 0x40, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := newTestRestoreSet(t)
		for _, chunk := range bytes.Split(data, []byte{0xff}) {
			if len(chunk) == 0 {
				continue
			}
			pkt := chunk[1:]
			if chunk[0]%2 == 0 {
				r.Observe(buffer.SequenceProperties{ProducerID: 1, WriterID: 1}, [][]byte{pkt})
				continue
			}
			if tracefile.ValidateProducerPacket(pkt) != nil {
				continue // the readback drops these before the restore step
			}
			out := readBack(t, r, 1, pkt, 65)
			if len(out) == 0 {
				t.Fatal("survivor lost")
			}
			if len(out) > 1 && (out[0].Info.SequenceFlags&tracefile.SeqIncrementalStateCleared == 0 || out[0].Info.PreviousPacketDropped != 65) {
				t.Fatalf("restore %+v", out[0].Info)
			}
			if last := out[len(out)-1]; !bytes.HasPrefix(last.Raw, pkt) {
				t.Fatal("survivor altered")
			}
		}
	})
}

// Producers set previous_packet_dropped themselves when their SMB was full
// (SMB_FULL): trace_processor invalidates the sequence on it like on a
// buffer loss, so such a packet gets a restore too, the restore carries
// both causes, and the packet ends with previous_packet_dropped = 0.
func TestRestoreOnProducerLoss(t *testing.T) {
	r := newTestRestoreSet(t)
	if out := readBack(t, r, 1, namesPacket(1, map[uint64]string{1: "a"}), 0); len(out) != 1 {
		t.Fatalf("clearing packet: %d packets", len(out))
	}
	withLoss := wire.AppendVarint(eventPacket(1), tracefile.FieldPreviousPacketDropped, tracefile.LossPresent|tracefile.LossSMBFull)
	out := readBack(t, r, 1, withLoss, 0) // no buffer loss, nothing overwritten
	if len(out) != 2 || out[0].Info.PreviousPacketDropped != tracefile.LossPresent|tracefile.LossSMBFull {
		t.Fatalf("%d packets, restore loss %d", len(out), out[0].Info.PreviousPacketDropped)
	}
	if out[1].Info.PreviousPacketDropped != 0 || !namesEqual(eventNames(t, out[0].Raw), map[uint64]string{1: "a"}) {
		t.Fatalf("survivor loss %d, restore names %v", out[1].Info.PreviousPacketDropped, eventNames(t, out[0].Raw))
	}
	// Both causes when the buffer lost data too.
	out = readBack(t, r, 1, withLoss, tracefile.LossPresent|tracefile.LossOverwrite)
	if want := uint32(tracefile.LossPresent | tracefile.LossSMBFull | tracefile.LossOverwrite); len(out) != 2 || out[0].Info.PreviousPacketDropped != want || out[1].Info.PreviousPacketDropped != 0 {
		t.Fatalf("restore loss %d (want %d), survivor %d", out[0].Info.PreviousPacketDropped, want, out[1].Info.PreviousPacketDropped)
	}
}
