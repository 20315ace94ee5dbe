package main

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/gzip"
	"gonum.org/v1/plot/vg"

	. "github.com/tracepipe/tracepipe/internal/tracebuild"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tpimport"
	"github.com/tracepipe/tracepipe/tracefile"
)

// evalTestTrace is a lossless trace in the synthetic source's shape: three
// sequences; each starts (and every 150 packets restarts) with a CLEARED
// packet carrying its track descriptor; events are NEEDS packets that
// intern their name on first use since the last CLEARED, padded to random
// sizes so chunks fill unevenly. Packets stay below a chunk, so nothing
// is fragmented.
func evalTestTrace(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	pkts := [][]byte{Packet(Seq(1), Snapshot(6, C(6, 1000*ms), C(3, 900*ms)))}
	count := map[uint32]int{}
	interned := map[uint32]map[uint64]bool{}
	for i := 0; i < n; i++ {
		seq := uint32(2 + rng.IntN(3))
		j := count[seq]
		count[seq]++
		ts := Ts(uint64(1000*ms + i))
		who := []Field{Seq(seq), UID(1000), Varint(tracefile.FieldTrustedPID, uint64(seq))}
		if j%150 == 0 {
			interned[seq] = map[uint64]bool{}
			pkts = append(pkts, Packet(append(who, ts, Flags(Cleared), Descriptor(uint64(seq)*10, "t", false))...))
			continue
		}
		iid := uint64(j%37 + 1)
		f := append(who, ts, Flags(Needs))
		if !interned[seq][iid] {
			interned[seq][iid] = true
			f = append(f, Interned(EventName(iid, "event_"+strings.Repeat("x", int(iid)))))
		}
		pad := strings.Repeat("p", 20+rng.IntN(400))
		f = append(f, Event(Instant, uint64(seq)*10, iid, Sub(4, String(10, "pad"), String(6, pad))))
		pkts = append(pkts, Packet(f...))
	}
	return Trace(pkts...)
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
func bruteForce(t *testing.T, trace []byte, ringSize int, prog []byte, memKB int) (base, restore, protoVMs EvalResult) {
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
		if c == nil || c.size+4+len(body) > evalChunkPayload {
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
	results := [3]EvalResult{}
	for v := range 3 {
		r := &results[v]
		r.Packets, r.Overwritten = int64(len(pkts)), int64(len(evicted))
		out := slices.Clone(head)
		if v == 2 {
			var ids []Field
			for s := uint32(2); s <= 4; s++ {
				ids = append(ids, Sub(1, Varint(1, uint64(s)), Varint(2, evalProducer)))
			}
			out = append(out, Packet(Sub(tracefile.FieldTraceProvenance, Sub(2, ids...)), Seq(1)),
				Packet(ProtoVMs(prog, shared.SerializeIncrementalState(nil), uint32(memKB), evalProducer), Seq(1)))
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
	trace := evalTestTrace(16000)
	ring := 256 << 10
	if len(trace) < 16*ring {
		t.Fatalf("trace %d bytes, want ≥ 16× the ring", len(trace))
	}
	path := writeFile(t, "full.pftrace", trace)
	progPath := "../../configs/protovm/interned_names.yaml"
	got, err := runEval(path, evalOptions{bufferSize: ring, memoryLimitKB: 64, programs: []string{progPath}, protoVMs: true}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(progPath)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := protovm.Compile(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, restore, pvm := bruteForce(t, trace, ring, prog, 64)
	t.Logf("brute force:\n baseline %+v\n restore %+v\n protovms %+v", base, restore, pvm)
	for i, want := range []EvalResult{base, restore, pvm} {
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

// The command prints the table, --json and --plot write their outputs.
func TestProtoVMEvalCmd(t *testing.T) {
	path := writeFile(t, "full.pftrace.gz", gzipped(t, evalTestTrace(3000)))
	plot := filepath.Join(t.TempDir(), "eval.svg")
	stdout, stderr, code := runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "64KiB",
		"--program", "../../configs/protovm/interned_names.yaml", "--plot", plot)
	if code != exitOK || !strings.Contains(stdout, "interned_names.yaml/restore") || !strings.Contains(stdout, "baseline") {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("plot: %v", err)
	}
	stdout, _, code = runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "64KiB", "--json")
	if code != exitOK || !strings.Contains(stdout, `"variant": "baseline"`) {
		t.Fatalf("--json: exit %d\n%s", code, stdout)
	}
	if _, _, code = runCLI(t, "protovm", "eval", "--trace", path, "--buffer", "lots"); code != exitUsage {
		t.Fatalf("bad --buffer: exit %d", code)
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

// Packets bigger than a chunk are fragmented across chunks and come back
// whole when the ring keeps them.
func TestProtoVMEvalFragmentedPackets(t *testing.T) {
	big := strings.Repeat("b", 3*evalChunkPayload+100)
	trace := Trace(
		Packet(Seq(1), Snapshot(6, C(6, 1000*ms))),
		Packet(Seq(2), Flags(Cleared), Descriptor(20, "t", false)),
		Packet(Seq(2), Ts(1001*ms), Flags(Needs), Event(Instant, 20, 0, String(23, big))),
		Packet(Seq(2), Ts(1002*ms), Flags(Needs), Event(Instant, 20, 0, String(23, "small"))),
		Packet(Seq(3), Ts(1002*ms), Event(Instant, 20, 0, String(23, big[:5000]))),
	)
	path := writeFile(t, "frag.pftrace", trace)
	res, err := runEval(path, evalOptions{bufferSize: 1 << 20, memoryLimitKB: 64}, io.Discard)
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
	f.Add(evalTestTrace(40))
	f.Add(Trace(Packet(Seq(2), Flags(Cleared), Interned(EventName(1, "a"))), Packet(Seq(2), Ts(5), Flags(Needs), Event(Instant, 0, 1))))
	src, err := os.ReadFile("../../configs/protovm/interned_names.yaml")
	if err != nil {
		f.Fatal(err)
	}
	prog := filepath.Join(f.TempDir(), "prog.yaml")
	if err := os.WriteFile(prog, src, 0o644); err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "fuzz.pftrace")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		res, err := runEval(path, evalOptions{bufferSize: 16 << 10, memoryLimitKB: 16, programs: []string{prog}}, io.Discard)
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

// The chart had overlapping x labels, a clipped legend and title, and the
// legend over the 100 % bar: the legend now has a band above 100 %, each
// variant's group is as wide as its label lines, the title names the trace
// by its base name and fits the canvas.
func TestEvalPlotLayout(t *testing.T) {
	res := []EvalResult{
		{Variant: "baseline", Share: 0.001, SurvivorShare: 0.001},
		{Variant: "a_rather_long_program_name.yaml/restore", Share: 0.15, SurvivorShare: 1},
		{Variant: "a_rather_long_program_name.yaml/protovms", Share: 0, SurvivorShare: 0},
	}
	p, width, height, err := evalPlot(res, "/some/long/directory/full.pftrace", 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Max <= 100 || !p.Legend.Top {
		t.Errorf("no band for the legend above the 100 %% bars: y max %v, legend top %v", p.Y.Max, p.Legend.Top)
	}
	for _, tk := range p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) {
		if tk.Value > 100 && tk.Label != "" {
			t.Errorf("a labelled tick above 100 %%: %+v", tk)
		}
	}
	if strings.Contains(p.Title.Text, "/some/long") || !strings.Contains(p.Title.Text, "full.pftrace") || !strings.Contains(p.Title.Text, "512 KiB") {
		t.Errorf("title %q", p.Title.Text)
	}
	// Each group holds its longest label line ("a_rather_long_program_name.yaml",
	// 31 characters) with room to spare, at the tick font's size.
	perGroup := (width - vg.Points(90)) / vg.Length(len(res))
	if min := vg.Length(31*0.5) * p.X.Tick.Label.Font.Size; perGroup < min {
		t.Errorf("group width %v < the label's %v: labels overlap", perGroup, min)
	}
	if height < 3*vg.Inch {
		t.Errorf("height %v", height)
	}
	// Renders as SVG and PNG.
	for _, ext := range []string{"svg", "png"} {
		path := filepath.Join(t.TempDir(), "eval."+ext)
		if err := plotEval(res, path, "full.pftrace", 512<<10); err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Fatalf("%s: %v", ext, err)
		}
	}
}
