package eval

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

const ms = 1_000_000

// program compiles the program description at path.
func program(t testing.TB, path string) Program {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	code, err := protovm.Compile(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	return Program{Path: path, Code: code}
}

// bruteForce computes what `protovm eval` must report, without the
// buffer package: chunks are cut as eval cuts them, placed in a byte ring
// as TraceBufferV2 places records (16-byte header, 16-byte alignment; a
// record that does not fit before the end wraps to 0; every record
// overlapping a new one is evicted), survivors are the packets of the
// records left, and the VMs fold evicted packets in eviction order.
// Importability is computed twice: by the simple rule of this trace's
// shape (a NEEDS packet imports iff its sequence saw no loss, or a restore
// packet, or a CLEARED survivor before it) and by tpimport on the trace
// eval would present.
func bruteForce(t *testing.T, trace []byte, ringSize int, prog []byte, memKB int) (base, restore, protoVMs Result) {
	t.Helper()
	type pkt struct {
		seq    uint32
		body   []byte // without trusted fields
		uid    int32
		pid    int32
		needs  bool
		clears bool
	}
	type chunk struct {
		seq        uint32
		pkts       []int
		size       int
		start, end int
	}
	all, err := tracefile.ReadAll(bytes.NewReader(trace))
	if err != nil {
		t.Fatal(err)
	}
	var head [][]byte
	var pkts []pkt
	open := map[uint32]*chunk{}
	var commits []*chunk
	commit := func(c *chunk) {
		if c != nil && len(c.pkts) > 0 {
			commits = append(commits, c)
		}
	}
	for _, b := range all {
		info, _ := tracefile.DecodePacket(b)
		if info.SequenceID <= 1 {
			head = append(head, b)
			continue
		}
		body, _ := stripTrusted(nil, b)
		p := pkt{seq: info.SequenceID, body: body, uid: info.TrustedUID, pid: info.TrustedPID,
			needs: info.SequenceFlags&2 != 0, clears: info.SequenceFlags&1 != 0}
		pkts = append(pkts, p)
		c := open[p.seq]
		if c == nil || c.size+4+len(body) > chunkPayload {
			commit(c)
			c = &chunk{seq: p.seq}
			open[p.seq] = c
		}
		c.pkts = append(c.pkts, len(pkts)-1)
		c.size += 4 + len(body)
	}
	for _, s := range slices.Sorted(func(yield func(uint32) bool) {
		for s := range open {
			if !yield(s) {
				return
			}
		}
	}) {
		commit(open[s])
	}

	// The byte ring.
	var live []*chunk
	var evicted []int // packet indices in eviction order
	wr := 0
	evict := func(lo, hi int) {
		keep := live[:0]
		for _, c := range live {
			if c.start < hi && c.end > lo {
				evicted = append(evicted, c.pkts...)
			} else {
				keep = append(keep, c)
			}
		}
		live = keep
	}
	for _, c := range commits {
		outer := (16 + c.size + 15) &^ 15
		if outer > ringSize-wr {
			evict(wr, ringSize)
			wr = 0
		}
		evict(wr, wr+outer)
		c.start, c.end = wr, wr+outer
		wr += outer
		live = append(live, c)
	}
	survived := map[int]bool{}
	for _, c := range live {
		for _, i := range c.pkts {
			survived[i] = true
		}
	}
	lost := map[uint32]bool{}
	for _, i := range evicted {
		lost[pkts[i].seq] = true
	}

	// The VMs.
	seqVMs := map[uint32]*protovm.VM{}
	var retired []*protovm.VM
	shared, err := protovm.New(prog, memKB*1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range evicted {
		p := pkts[i]
		vm := seqVMs[p.seq]
		if vm == nil || p.clears {
			if vm != nil {
				retired = append(retired, vm)
			}
			vm, _ = protovm.New(prog, memKB*1024)
			seqVMs[p.seq] = vm
		}
		vm.ApplyPatch(p.body)
		shared.ApplyPatch(p.body)
	}

	// Present the survivors, in file order (per-sequence order is what
	// matters), as each variant does, and predict the import.
	results := [3]Result{}
	for v := range 3 {
		r := &results[v]
		r.Packets, r.Overwritten = int64(len(pkts)), int64(len(evicted))
		out := slices.Clone(head)
		if v == 2 {
			var ids []Field
			for s := uint32(2); s <= 4; s++ {
				ids = append(ids, Sub(1, Varint(1, uint64(s)), Varint(2, producerID)))
			}
			out = append(out, Packet(Sub(tracefile.FieldTraceProvenance, Sub(2, ids...)), Seq(1)),
				Packet(ProtoVMs(prog, shared.SerializeIncrementalState(nil), uint32(memKB), producerID), Seq(1)))
			r.StateBytes = len(shared.SerializeIncrementalState(nil))
			st := shared.Stats()
			r.PatchOk, r.PatchError, r.PatchAbort = st.PatchesApplied, st.PatchesFailed, st.PatchesAborted
		}
		first := map[uint32]bool{}
		valid := map[uint32]bool{}
		simple := int64(0)
		for i, p := range pkts {
			if !survived[i] {
				continue
			}
			r.Survived++
			loss := uint32(0)
			if !first[p.seq] {
				first[p.seq] = true
				if lost[p.seq] {
					loss = tracefile.LossPresent | tracefile.LossOverwrite
				}
				valid[p.seq] = !lost[p.seq]
				if v == 1 && seqVMs[p.seq] != nil {
					restorePkt := append(seqVMs[p.seq].SerializeIncrementalState(nil), Message(Flags(Cleared))...)
					out = append(out, tracefile.AppendTrusted(restorePkt, tracefile.Trusted{UID: p.uid, SequenceID: p.seq, PID: p.pid, HasPID: true, PreviousPacketDropped: loss}))
					r.RestorePackets++
					loss = 0
					valid[p.seq] = true
				}
			}
			if p.clears {
				valid[p.seq] = true
			}
			if !p.needs || valid[p.seq] {
				simple++
			}
			out = append(out, tracefile.AppendTrusted(slices.Clone(p.body), tracefile.Trusted{UID: p.uid, SequenceID: p.seq, PID: p.pid, HasPID: true, PreviousPacketDropped: loss}))
		}
		rep, err := tpimport.Check(bytes.NewReader(Trace(out...)), tpimport.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r.Importable = rep.ProducerImported - r.RestorePackets
		for _, s := range rep.Sequences {
			if s.ID > 1 {
				r.Skipped += s.NeedsSkipped
			}
		}
		if v != 2 && r.Importable != simple {
			t.Errorf("variant %d: tpimport says %d importable, the simple rule %d", v, r.Importable, simple)
		}
	}
	for _, vm := range append(retired, slices.Collect(func(yield func(*protovm.VM) bool) {
		for _, vm := range seqVMs {
			if !yield(vm) {
				return
			}
		}
	})...) {
		st := vm.Stats()
		results[1].PatchOk += st.PatchesApplied
		results[1].PatchError += st.PatchesFailed
		results[1].PatchAbort += st.PatchesAborted
	}
	for _, vm := range seqVMs {
		results[1].StateBytes += len(vm.SerializeIncrementalState(nil))
	}
	return results[0], results[1], results[2]
}

// TestProtoVMEvalMatchesBruteForce: eval's numbers equal a brute-force
// replay, for a trace 16× the ring (the 64 MiB / 4 MiB ratio of the issue,
// scaled down).
func TestProtoVMEvalMatchesBruteForce(t *testing.T) {
	trace := InterningTrace(16000)
	ring := 256 << 10
	if len(trace) < 16*ring {
		t.Fatalf("trace %d bytes, want ≥ 16× the ring", len(trace))
	}
	path := testsupport.WriteTempFile(t, "full.pftrace", trace)
	pr := program(t, "../../configs/protovm/interned_names.yaml")
	got, err := Run(path, Options{BufferSize: ring, MemoryLimitKB: 64, Programs: []Program{pr}, ProtoVMs: true})
	if err != nil {
		t.Fatal(err)
	}
	prog := pr.Code
	base, restore, pvm := bruteForce(t, trace, ring, prog, 64)
	t.Logf("brute force:\n baseline %+v\n restore %+v\n protovms %+v", base, restore, pvm)
	for i, want := range []Result{base, restore, pvm} {
		g := got[i]
		for _, c := range []struct {
			name      string
			got, want any
		}{
			{"packets", g.Packets, want.Packets}, {"survived", g.Survived, want.Survived},
			{"overwritten", g.Overwritten, want.Overwritten}, {"importable", g.Importable, want.Importable},
			{"skipped", g.Skipped, want.Skipped}, {"restore packets", g.RestorePackets, want.RestorePackets},
			{"state bytes", g.StateBytes, want.StateBytes}, {"patches ok", g.PatchOk, want.PatchOk},
			{"patches error", g.PatchError, want.PatchError}, {"patches abort", g.PatchAbort, want.PatchAbort},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s = %v, brute force %v", g.Variant, c.name, c.got, c.want)
			}
		}
	}
	// The premises: the ring overwrote most of the trace, the baseline
	// loses survivors to the skip rule and the restore path recovers them.
	if base.Overwritten < base.Packets/2 || base.Skipped == 0 || restore.Skipped != 0 || restore.Importable != restore.Survived {
		t.Errorf("premise: baseline %+v, restore %+v", base, restore)
	}
}

// Packets bigger than a chunk are fragmented across chunks and come back
// whole when the ring keeps them.
func TestProtoVMEvalFragmentedPackets(t *testing.T) {
	big := strings.Repeat("b", 3*chunkPayload+100)
	trace := Trace(
		Packet(Seq(1), Snapshot(6, C(6, 1000*ms))),
		Packet(Seq(2), Flags(Cleared), Descriptor(20, "t", false)),
		Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(Instant, 20, 0, String(23, big))),
		Packet(Seq(2), Ts(1002*ms), Flags(Needs), Event(Instant, 20, 0, String(23, "small"))),
		Packet(Seq(3), Ts(1002*ms), Event(Instant, 20, 0, String(23, big[:5000]))),
	)
	path := testsupport.WriteTempFile(t, "frag.pftrace", trace)
	res, err := Run(path, Options{BufferSize: 1 << 20, MemoryLimitKB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.Packets != 4 || r.Survived != 4 || r.Importable != 4 || r.Overwritten != 0 {
		t.Fatalf("baseline %+v", r)
	}
}

// FuzzProtoVMEval replays arbitrary bytes as a trace: eval must not
// panic, and its counts must add up.
func FuzzProtoVMEval(f *testing.F) {
	f.Add(InterningTrace(40))
	f.Add(Trace(Packet(Seq(2), Flags(Cleared), Interned(EventName(1, "a"))), Packet(Seq(2), Ts(5), Flags(Needs), Event(Instant, 0, 1))))
	prog := program(f, "../../configs/protovm/interned_names.yaml")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.pftrace")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := Run(path, Options{BufferSize: 16 << 10, MemoryLimitKB: 16, Programs: []Program{prog}})
		if err != nil {
			return
		}
		for _, r := range res {
			if r.Survived+r.Overwritten > r.Packets || r.Importable > r.Survived || r.Importable < 0 {
				t.Fatalf("counts do not add up: %+v", r)
			}
		}
	})
}
