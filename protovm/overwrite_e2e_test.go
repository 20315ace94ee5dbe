package protovm

// End-to-end: a small ring-buffer TraceBuffer whose overwrites feed an
// Instances through the overwrite observer, with the interned-names program
// of configs/protovm. (buffer imports only the standard library, so this
// test-only import makes no cycle.)

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/buffer"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	e2eProducer = 1
	e2eWriter   = 1
	e2eBufSize  = 16 * 1024
)

var e2eClient = buffer.ClientIdentity{UID: 1001, PID: 101}

// e2ePacket is packet k (k >= 1): timestamp k; for k%5 != 0 it interns
// event name iid k ("event-k"); every packet references an older iid
// (k/2+1, through track_event.name_iid) and carries a filler of varying size.
func e2ePacket(k uint64) []byte {
	var names []iname
	if k%5 != 0 {
		names = []iname{{k, fmt.Sprintf("event-%d", k)}}
	}
	p := internedPacket(k, names, nil, k/2+1)
	return append(p, msg(1000, strings.Repeat("f", 40+int(k*37%160)))...)
}

// e2eDefined reports whether packet k defines iid k.
func e2eDefined(k uint64) bool { return k%5 != 0 }

// chunkWriter frames packets into SMB chunks like buffer's fakeChunk: each
// fragment is a varint size followed by its bytes; up to three fragments
// per chunk; a split packet ends a chunk with LastPacketContinuesOnNextChunk
// (0x02) and starts the next with FirstPacketContinuesFromPrevChunk (0x01).
type chunkWriter struct {
	b       *buffer.TraceBuffer
	chunkID uint32
	payload []byte
	nfrags  uint16
	flags   uint8
}

func (w *chunkWriter) fragment(data []byte) {
	w.payload = protowire.AppendVarint(w.payload, uint64(len(data)))
	w.payload = append(w.payload, data...)
	w.nfrags++
}

func (w *chunkWriter) flush() {
	if w.nfrags == 0 {
		return
	}
	w.b.CopyChunkUntrusted(e2eProducer, e2eClient, e2eWriter, w.chunkID, w.nfrags, w.flags, true, w.payload)
	w.chunkID++
	w.payload, w.nfrags, w.flags = w.payload[:0], 0, 0
}

// write adds packet p, split across two chunks when split is set.
func (w *chunkWriter) write(p []byte, split bool) {
	if split {
		cut := len(p) / 2
		w.fragment(p[:cut])
		w.flags |= 0x02
		w.flush()
		w.flags = 0x01
		w.fragment(p[cut:])
	} else {
		w.fragment(p)
	}
	if w.nfrags >= 3 {
		w.flush()
	}
}

// writePackets writes packets from..to (inclusive); every 7th is split.
func (w *chunkWriter) writePackets(from, to uint64) {
	for k := from; k <= to; k++ {
		w.write(e2ePacket(k), k%7 == 3)
	}
	w.flush()
}

// packetTS returns the timestamp (field 8) of a packet.
func packetTS(t testing.TB, p []byte) uint64 {
	t.Helper()
	for _, f := range decodeWire(t, p) {
		if f.num == 8 {
			return f.v
		}
	}
	t.Fatalf("packet without timestamp: %x", p)
	return 0
}

// readAll runs one read pass and returns the packets' bytes.
func readAll(t testing.TB, b *buffer.TraceBuffer) [][]byte {
	t.Helper()
	var out [][]byte
	var p buffer.Packet
	b.BeginRead()
	for b.ReadNextTracePacket(&p) {
		if p.Seq.ProducerID != e2eProducer || p.Seq.WriterID != e2eWriter {
			t.Fatalf("packet of sequence %+v", p.Seq)
		}
		out = append(out, p.AppendTo(nil))
	}
	return out
}

const e2eN = 600

func newE2EBuffer(t testing.TB) *buffer.TraceBuffer {
	t.Helper()
	b, err := buffer.New(e2eBufSize, buffer.RingBuffer)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestProtoVMOverwriteEndToEnd(t *testing.T) {
	prog, err := Compile(internedNamesYAML(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{}
	for k := uint64(1); k <= e2eN; k++ {
		if e2eDefined(k) {
			want[k] = fmt.Sprintf("event-%d", k)
		}
	}

	// (a) Without a VM, the early definitions are gone.
	plain := newE2EBuffer(t)
	(&chunkWriter{b: plain}).writePackets(1, e2eN)
	if st := plain.Stats(); st.WriteWrapCount < 3 || st.ChunksOverwritten == 0 {
		t.Fatalf("buffer did not wrap several times: %+v", st)
	}
	plainRead := readAll(t, plain)
	readNames := map[uint64]string{}
	for _, p := range plainRead {
		n, _ := internedEntries(t, p, false)
		maps.Copy(readNames, n)
	}
	for _, iid := range []uint64{1, 2, 3, 4, 6, 7, 100, 101, 299} {
		if _, ok := readNames[iid]; ok {
			t.Fatalf("iid %d still defined in the readback of a wrapped 16 KiB buffer", iid)
		}
	}
	unresolved := 0
	for _, p := range plainRead {
		k := packetTS(t, p)
		if _, ok := readNames[k/2+1]; !ok && e2eDefined(k/2+1) {
			unresolved++
		}
	}
	if unresolved == 0 {
		t.Fatal("no surviving packet references an overwritten iid; the scenario proves nothing")
	}
	t.Logf("without ProtoVM: %d packets read, %d of them reference an iid whose definition was overwritten", len(plainRead), unresolved)

	// (b) With the Instances as the overwrite observer.
	b := newE2EBuffer(t)
	var inst Instances
	if _, err := inst.Add("synthetic", prog, 1024, e2eProducer); err != nil {
		t.Fatal(err)
	}
	var observed []uint64
	multiFragment := 0
	b.SetOverwriteObserver(func(seq buffer.SequenceProperties, packet [][]byte) {
		if seq.ProducerID != e2eProducer || seq.WriterID != e2eWriter || seq.Client != e2eClient {
			t.Errorf("observer got sequence %+v", seq)
		}
		var joined []byte
		for _, f := range packet {
			joined = append(joined, f...)
		}
		if len(packet) > 1 {
			multiFragment++
		}
		observed = append(observed, packetTS(t, joined))
		inst.Observe(int32(seq.ProducerID), packet)
	})
	(&chunkWriter{b: b}).writePackets(1, e2eN)
	read := readAll(t, b)
	if !slices.EqualFunc(read, plainRead, func(x, y []byte) bool { return string(x) == string(y) }) {
		t.Fatal("the observer changed what is read back")
	}

	// The observer saw packets 1..m in order, the readback m+1..N: every
	// packet exactly once, in sequence order.
	m := uint64(len(observed))
	for i, ts := range observed {
		if ts != uint64(i)+1 {
			t.Fatalf("observed packet %d has timestamp %d, want %d (sequence order)", i, ts, i+1)
		}
	}
	for i, p := range read {
		if ts := packetTS(t, p); ts != m+uint64(i)+1 {
			t.Fatalf("read packet %d has timestamp %d, want %d", i, ts, m+uint64(i)+1)
		}
	}
	if m+uint64(len(read)) != e2eN || m == 0 || multiFragment == 0 {
		t.Fatalf("observed %d (%d fragmented) + read %d != %d", m, multiFragment, len(read), e2eN)
	}
	definedObserved := uint64(0)
	for k := uint64(1); k <= m; k++ {
		if e2eDefined(k) {
			definedObserved++
		}
	}
	if st := inst.Stats(); st.PatchesOk != definedObserved || st.PatchesError != m-definedObserved ||
		st.PacketsUnfolded != m-definedObserved || st.PatchesAbort != 0 || st.PacketsUnrouted != 0 || st.MemoryLimitHits != 0 {
		t.Fatalf("stats %+v (observed %d, %d with interned data)", st, m, definedObserved)
	}
	if inst.Generation() != definedObserved {
		t.Fatalf("generation %d, want %d", inst.Generation(), definedObserved)
	}

	// The emitted protovms state holds exactly the overwritten definitions;
	// with the read-back packets, every iid 1..N is defined.
	got := decodeProtoVMs(t, inst.AppendProtoVMsField(nil))
	if len(got) != 1 || string(got[0].program) != string(prog) || got[0].memoryLimit != 1024 ||
		!slices.Equal(got[0].producers, []int32{e2eProducer}) {
		t.Fatalf("protovms instance %+v", got)
	}
	stateNames, _ := internedEntries(t, got[0].state, true)
	for k := uint64(1); k <= e2eN; k++ {
		_, inState := stateNames[k]
		if inState != (k <= m && e2eDefined(k)) {
			t.Fatalf("iid %d in state: %v (observed up to %d)", k, inState, m)
		}
	}
	all := maps.Clone(stateNames)
	for _, p := range read {
		n, _ := internedEntries(t, p, false)
		maps.Copy(all, n)
	}
	if !maps.Equal(all, want) {
		t.Fatalf("state + readback define %d iids, want %d", len(all), len(want))
	}

	// The trace processor's way (§7.1): a VM from (program, state), the
	// read-back packets applied as patches; each Ok packet is replaced by
	// the state, which must resolve the packet's reference.
	tp, ok, err := NewWithState(got[0].program, int(got[0].memoryLimit)*1024, got[0].state)
	if err != nil || !ok {
		t.Fatalf("NewWithState: %v %v", ok, err)
	}
	for _, p := range read {
		k := packetTS(t, p)
		st := tp.ApplyPatch(p)
		if st.IsOk() != e2eDefined(k) {
			t.Fatalf("packet %d: %v", k, st)
		}
		names, _ := internedEntries(t, tp.SerializeIncrementalState(nil), true)
		if ref := k/2 + 1; e2eDefined(ref) && names[ref] != want[ref] {
			t.Fatalf("packet %d: reference %d resolves to %q, want %q", k, ref, names[ref], want[ref])
		}
	}
	final, _ := internedEntries(t, tp.SerializeIncrementalState(nil), true)
	if !maps.Equal(final, want) {
		t.Fatalf("replayed state defines %d iids, want %d", len(final), len(want))
	}
}

// streamEntry is one packet of a streamed trace: a protovms state or a
// buffer packet.
type streamEntry struct {
	isState bool
	state   []byte // protovms state of the single VM
	packet  []byte
}

// streamTrace writes packets in batches with a read pass after each
// (periodic reads), emitting the state before the first pass's packets and
// again before a pass whose preceding overwrites folded a packet
// (generation advanced). With foldReads, the packets read are also folded
// into the VM after being emitted, without counting as a state change.
func streamTrace(t *testing.T, prog []byte, foldReads bool) (file []streamEntry, total uint64) {
	t.Helper()
	b := newE2EBuffer(t)
	var inst Instances
	inst.Add("synthetic", prog, 1024, e2eProducer)
	b.SetOverwriteObserver(func(seq buffer.SequenceProperties, packet [][]byte) {
		inst.Observe(int32(seq.ProducerID), packet)
	})
	w := &chunkWriter{b: b}
	emitted, lastGen := false, uint64(0)
	k := uint64(1)
	// Batch sizes: small ones are read before anything is overwritten,
	// large ones overflow the buffer between two passes.
	for _, n := range []uint64{20, 30, 200, 10, 300, 40, 250} {
		w.writePackets(k, k+n-1)
		k += n
		if !emitted || inst.Generation() != lastGen {
			got := decodeProtoVMs(t, inst.AppendProtoVMsField(nil))
			file = append(file, streamEntry{isState: true, state: got[0].state})
			emitted, lastGen = true, inst.Generation()
		}
		for _, p := range readAll(t, b) {
			file = append(file, streamEntry{packet: p})
			if foldReads {
				inst.Observe(e2eProducer, [][]byte{p})
			}
		}
		lastGen = inst.Generation() // folded reads are not a reason to re-emit
	}
	states := 0
	for _, e := range file {
		if e.isState {
			states++
		}
	}
	if states < 3 || uint64(len(file)-states) == k-1 {
		t.Fatalf("%d states, %d of %d packets read: the scenario needs overwrites and re-emissions", states, len(file)-states, k-1)
	}
	return file, k - 1
}

// unresolvedRefs replays a streamed trace like a reader and counts the
// packets whose reference does not resolve to the right name. On a later
// state the reader either restarts from it (restart) or keeps its running
// VM and applies the state to it as a patch.
func unresolvedRefs(t *testing.T, prog []byte, file []streamEntry, restart bool) (bad int) {
	t.Helper()
	var vm *VM
	for _, e := range file {
		if e.isState {
			if vm == nil || restart {
				var err error
				if vm, _, err = NewWithState(prog, 1024*1024, e.state); err != nil {
					t.Fatal(err)
				}
			} else if st := vm.ApplyPatch(e.state); st.Code == Abort {
				t.Fatalf("state as a patch: %v", st)
			}
			continue
		}
		vm.ApplyPatch(e.packet)
		k := packetTS(t, e.packet)
		names, _ := internedEntries(t, vm.SerializeIncrementalState(nil), true)
		if ref := k/2 + 1; e2eDefined(ref) && names[ref] != fmt.Sprintf("event-%d", ref) {
			bad++
		}
	}
	return bad
}

// TestProtoVMOverwriteStreaming checks the reader rules of README.md
// "Streaming". The service folds only overwritten packets, so a state does
// not contain the packets read in earlier passes: a reader must keep its
// running VM and apply a later state to it as a patch; restarting from the
// latest state loses the definitions read in earlier passes. If the
// service also folded the packets it reads (foldReads), each state would
// be the fold of everything before the pass, and restarting would be
// exact.
func TestProtoVMOverwriteStreaming(t *testing.T) {
	prog, err := Compile(internedNamesYAML(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := streamTrace(t, prog, false)
	if bad := unresolvedRefs(t, prog, file, false); bad != 0 {
		t.Fatalf("keeping the running VM: %d packets with an unresolved reference", bad)
	}
	bad := unresolvedRefs(t, prog, file, true)
	if bad == 0 {
		t.Fatal("restarting from each state resolved everything: the scenario does not show the pitfall README.md describes")
	}
	t.Logf("%d entries; restarting from the latest state leaves %d references unresolved", len(file), bad)

	folded, _ := streamTrace(t, prog, true)
	for _, restart := range []bool{false, true} {
		if bad := unresolvedRefs(t, prog, folded, restart); bad != 0 {
			t.Fatalf("service folding reads, restart=%v: %d unresolved references", restart, bad)
		}
	}
}
