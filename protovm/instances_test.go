package protovm

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// wf is one decoded wire field (test helper).
type wf struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	b   []byte
}

// decodeWire decodes every field of b, failing the test on malformed data.
func decodeWire(t testing.TB, b []byte) []wf {
	t.Helper()
	var out []wf
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		f := wf{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(b)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(b)
			f.v = uint64(v)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(b)
		default:
			t.Fatalf("unexpected wire type %d", typ)
		}
		if n < 0 {
			t.Fatalf("bad field %d: %v", num, protowire.ParseError(n))
		}
		b = b[n:]
		out = append(out, f)
	}
	return out
}

// fieldsOf returns the fields numbered num.
func fieldsOf(fs []wf, num protowire.Number) []wf {
	var out []wf
	for _, f := range fs {
		if f.num == num {
			out = append(out, f)
		}
	}
	return out
}

func mustCompile(t testing.TB, yaml string) []byte {
	t.Helper()
	b, err := Compile([]byte(yaml), nil)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return b
}

// msg builds a message from alternating (field number, value) pairs: a
// value is a uint64/int (varint), a string or a []byte (length-delimited).
func msg(kv ...any) []byte {
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		num := protowire.Number(kv[i].(int))
		switch v := kv[i+1].(type) {
		case int:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(v))
		case uint64:
			b = protowire.AppendTag(b, num, protowire.VarintType)
			b = protowire.AppendVarint(b, v)
		case string:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, v)
		case []byte:
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendBytes(b, v)
		default:
			panic("msg: unsupported value type")
		}
	}
	return b
}

// Programs for the routing tests: each copies one TracePacket field into
// the state and fails (Error) when the packet lacks it.
const (
	progField1 = "commands:\n  - set: {src: [1], dst: [1]}\n"
	progField2 = "commands:\n  - set: {src: [2], dst: [2]}\n"
	// progAbort3 aborts on a packet whose field 3 is length-delimited
	// (reg_load of a non-scalar) and errors when field 3 is absent.
	progAbort3 = "instructions:\n  - select: {path: [3]}\n    nested:\n      - reg_load: {register: 0}\n"
)

func TestProtoVMInstancesRouting(t *testing.T) {
	p1, p2, p3 := mustCompile(t, progField1), mustCompile(t, progField2), mustCompile(t, progAbort3)
	var s Instances
	vmAbort, err := s.Add("c", p3, 64, 7)
	if err != nil {
		t.Fatal(err)
	}
	vm1, err := s.Add("a", p1, 64, 7)
	if err != nil {
		t.Fatal(err)
	}
	vm2, err := s.Add("b", p2, 64, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add("b", p2, 64, 8); err != nil {
		t.Fatal(err)
	}
	var aborts []string
	s.SetAbortHandler(func(ds string, st Status) { aborts = append(aborts, ds+": "+st.String()) })

	state := func(v *VM) string { return string(v.SerializeIncrementalState(nil)) }

	// Fields 1, 2 and a length-delimited 3: the abort VM is tried first
	// (creation order), aborts, then vm1 takes it; vm2 is never offered it.
	s.Observe(7, [][]byte{msg(1, "one", 2, "two", 3, "x")})
	if got, want := state(vm1), string(msg(1, "one")); got != want {
		t.Fatalf("vm1 state %x, want %x", got, want)
	}
	if state(vm2) != "" || vm2.Stats() != (Stats{}) {
		t.Fatalf("vm2 was offered a packet vm1 folded: state %x stats %+v", state(vm2), vm2.Stats())
	}
	if len(aborts) != 1 || !strings.HasPrefix(aborts[0], "c: abort") {
		t.Fatalf("abort handler calls: %q", aborts)
	}
	// Only field 2: abort VM errors (no field 3), vm1 errors, vm2 takes it.
	s.Observe(7, [][]byte{msg(2, "two")})
	if got, want := state(vm2), string(msg(2, "two")); got != want {
		t.Fatalf("vm2 state %x, want %x", got, want)
	}
	// Producer 8 is only in vm2's set: vm1 and the abort VM never see it.
	s.Observe(8, [][]byte{msg(1, "ignored", 2, "eight")})
	if got, want := state(vm2), string(msg(2, "eight")); got != want {
		t.Fatalf("vm2 state %x, want %x", got, want)
	}
	if got, want := state(vm1), string(msg(1, "one")); got != want {
		t.Fatalf("vm1 changed by producer 8's packet: %x", got)
	}
	// Nothing any VM wants: offered to all three, none Ok.
	s.Observe(7, [][]byte{msg(4, "four")})
	// Producer 9 has no VM.
	s.Observe(9, [][]byte{msg(1, "nine", 2, "nine")})

	if got := vmAbort.Stats(); got != (Stats{PatchesFailed: 2, PatchesAborted: 1}) {
		t.Fatalf("abort VM stats %+v", got)
	}
	if got := vm1.Stats(); got != (Stats{PatchesApplied: 1, PatchesFailed: 2}) {
		t.Fatalf("vm1 stats %+v", got)
	}
	if got := vm2.Stats(); got != (Stats{PatchesApplied: 2, PatchesFailed: 1}) {
		t.Fatalf("vm2 stats %+v", got)
	}
	want := InstancesStats{PatchesOk: 3, PatchesError: 5, PatchesAbort: 1, PacketsUnrouted: 1, PacketsUnfolded: 1}
	if got := s.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
	if s.Generation() != 3 {
		t.Fatalf("generation %d, want 3", s.Generation())
	}
	names := map[string]uint64{}
	for _, f := range s.Stats().Fields() {
		names[f.Name] = f.Value
	}
	wantNames := map[string]uint64{
		"protovm_patches_ok": 3, "protovm_patches_error": 5, "protovm_patches_abort": 1,
		"protovm_packets_unrouted": 1, "protovm_packets_unfolded": 1, "protovm_memory_limit_hits": 0,
	}
	if !reflect.DeepEqual(names, wantNames) {
		t.Fatalf("Fields() = %v, want %v", names, wantNames)
	}
}

func TestProtoVMInstancesReuse(t *testing.T) {
	p1 := mustCompile(t, progField1)
	p1v2 := mustCompile(t, "version: 2\n"+progField1)
	if bytes.Equal(p1, p1v2) {
		t.Fatal("version did not change the program bytes")
	}
	var s Instances
	a, _ := s.Add("ds", p1, 4, 1)
	a2, _ := s.Add("ds", p1, 99, 2)    // same name and program: reused
	a3, _ := s.Add("ds", p1, 99, 1)    // producer already there
	b, _ := s.Add("other", p1, 8, 1)   // same program, other name
	c, _ := s.Add("ds", p1v2, 16, 3)   // same name, other program
	c2, _ := s.Add("ds", p1v2, 16, -5) // negative ids are kept as int32
	if a != a2 || a != a3 || c != c2 {
		t.Fatal("same (name, program) did not reuse the VM")
	}
	if a == b || a == c || b == c {
		t.Fatal("different (name, program) shared a VM")
	}
	if s.Len() != 3 {
		t.Fatalf("Len %d, want 3", s.Len())
	}
	if a.MemoryLimit() != 4*1024 {
		t.Fatalf("reused VM limit %d, want the first creation's 4 KiB", a.MemoryLimit())
	}
	order := []string{}
	for _, in := range s.list {
		order = append(order, in.dataSource)
	}
	if !reflect.DeepEqual(order, []string{"ds", "other", "ds"}) {
		t.Fatalf("creation order %v", order)
	}
	if !reflect.DeepEqual(s.list[0].producers, []int32{1, 2}) || !reflect.DeepEqual(s.list[2].producers, []int32{-5, 3}) {
		t.Fatalf("producer sets %v %v", s.list[0].producers, s.list[2].producers)
	}
	if s.MemoryUsage() != a.MemoryUsage()+b.MemoryUsage()+c.MemoryUsage() {
		t.Fatal("MemoryUsage is not the sum of the VMs'")
	}
	// An invalid program registers nothing.
	if _, err := s.Add("bad", []byte{0x0a, 0x05}, 4, 1); err == nil {
		t.Fatal("truncated program accepted")
	}
	if s.Len() != 3 {
		t.Fatalf("Len %d after a failed Add", s.Len())
	}
}

func TestProtoVMInstancesFragments(t *testing.T) {
	prog := mustCompile(t, progField1+"  - set: {src: [2], dst: [2]}\n")
	whole := msg(1, strings.Repeat("a", 200), 2, "second field")
	var ref Instances
	refVM, _ := ref.Add("ds", prog, 64, 1)
	ref.Observe(1, [][]byte{whole})
	want := refVM.SerializeIncrementalState(nil)
	if len(want) == 0 {
		t.Fatal("reference state empty")
	}
	// Every split into three fragments (cuts inside tags, varints and
	// payloads), plus empty fragments, must give the same state.
	for i := 0; i <= len(whole); i += 7 {
		for j := i; j <= len(whole); j += 13 {
			var s Instances
			vm, _ := s.Add("ds", prog, 64, 1)
			s.Observe(1, [][]byte{whole[:i], {}, whole[i:j], whole[j:]})
			if got := vm.SerializeIncrementalState(nil); !bytes.Equal(got, want) {
				t.Fatalf("split %d/%d: state %x, want %x", i, j, got, want)
			}
		}
	}
	// The scratch buffer is reused: a shorter packet after a longer one
	// must not see stale bytes.
	var s Instances
	vm, _ := s.Add("ds", prog, 64, 1)
	s.Observe(1, [][]byte{whole[:10], whole[10:]})
	short := msg(1, "x")
	s.Observe(1, [][]byte{short[:1], short[1:]})
	if got := vm.SerializeIncrementalState(nil); !bytes.Equal(got, msg(1, "x", 2, "second field")) {
		t.Fatalf("state after a shorter packet: %x", got)
	}
}

func TestProtoVMInstancesGeneration(t *testing.T) {
	var s Instances
	if s.Generation() != 0 {
		t.Fatal("fresh generation not 0")
	}
	s.Add("ds", mustCompile(t, progField1), 64, 1)
	steps := []struct {
		producer int32
		pkt      []byte
		gen      uint64
	}{
		{1, msg(1, "a"), 1},
		{1, msg(2, "no field 1"), 1}, // Error: no change
		{2, msg(1, "b"), 1},          // unrouted
		{1, msg(1, "a"), 2},          // Ok even if the state ends up equal
		{1, msg(1, "c"), 3},
	}
	for i, st := range steps {
		s.Observe(st.producer, [][]byte{st.pkt})
		if s.Generation() != st.gen {
			t.Fatalf("step %d: generation %d, want %d", i, s.Generation(), st.gen)
		}
	}
}

// decodedInstance is one ProtoVms.Instance decoded field by field.
type decodedInstance struct {
	program     []byte
	state       []byte
	hasState    bool
	memoryLimit uint64
	producers   []int32
}

// decodeProtoVMs decodes a byte string holding exactly one TracePacket
// field 125, checking every field's number and wire type.
func decodeProtoVMs(t testing.TB, b []byte) []decodedInstance {
	t.Helper()
	top := decodeWire(t, b)
	if len(top) != 1 || top[0].num != 125 || top[0].typ != protowire.BytesType {
		t.Fatalf("want one TracePacket field 125 (LEN), got %+v", top)
	}
	var out []decodedInstance
	for _, f := range decodeWire(t, top[0].b) {
		if f.num != 1 || f.typ != protowire.BytesType {
			t.Fatalf("ProtoVms: unexpected field %d type %d", f.num, f.typ)
		}
		var d decodedInstance
		for _, g := range decodeWire(t, f.b) {
			switch {
			case g.num == 1 && g.typ == protowire.BytesType:
				d.program = g.b
			case g.num == 2 && g.typ == protowire.BytesType:
				d.state, d.hasState = g.b, true
			case g.num == 3 && g.typ == protowire.VarintType:
				d.memoryLimit = g.v
			case g.num == 4 && g.typ == protowire.VarintType:
				d.producers = append(d.producers, int32(g.v))
			default:
				t.Fatalf("Instance: unexpected field %d type %d", g.num, g.typ)
			}
		}
		out = append(out, d)
	}
	return out
}

func TestProtoVMInstancesEmit(t *testing.T) {
	p1, p2 := mustCompile(t, progField1), mustCompile(t, progField2)
	var s Instances
	if got := s.AppendProtoVMsField(nil); !bytes.Equal(got, []byte{0xea, 0x07, 0x00}) {
		t.Fatalf("empty set: %x, want an empty field 125", got)
	}
	vm1, _ := s.Add("a", p1, 64, 3)
	s.Add("a", p1, 64, 1)
	s.Add("a", p1, 64, -2)
	vm2, _ := s.Add("b", p2, 300, 5) // state stays empty
	s.Observe(1, [][]byte{msg(1, strings.Repeat("z", 150))})

	prefix := []byte("header")
	out := s.AppendProtoVMsField(slices.Clone(prefix))
	if !bytes.HasPrefix(out, prefix) {
		t.Fatal("dst prefix lost")
	}
	got := decodeProtoVMs(t, out[len(prefix):])
	if len(got) != 2 {
		t.Fatalf("%d instances, want 2", len(got))
	}
	want := []decodedInstance{
		{program: p1, state: vm1.SerializeIncrementalState(nil), hasState: true, memoryLimit: 64, producers: []int32{-2, 1, 3}},
		{program: p2, state: vm2.SerializeIncrementalState(nil), hasState: true, memoryLimit: 300, producers: []int32{5}},
	}
	for i := range want {
		g, w := got[i], want[i]
		if !bytes.Equal(g.program, w.program) || !bytes.Equal(g.state, w.state) || g.hasState != w.hasState ||
			g.memoryLimit != w.memoryLimit || !reflect.DeepEqual(g.producers, w.producers) {
			t.Fatalf("instance %d:\n got  %+v\n want %+v", i, g, w)
		}
	}
	if len(got[0].state) == 0 || len(got[1].state) != 0 {
		t.Fatalf("state sizes %d, %d", len(got[0].state), len(got[1].state))
	}
	// A negative producer id is a 10-byte sign-extended varint (int32).
	if !bytes.Contains(out, []byte{0x20, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}) {
		t.Fatal("producer id -2 not encoded as a sign-extended int32 varint")
	}
	// Emitting twice gives the same bytes (the state scratch is reused).
	if again := s.AppendProtoVMsField(slices.Clone(prefix)); !bytes.Equal(again, out) {
		t.Fatal("second emission differs")
	}
}

func TestProtoVMInstancesCloneReadOnly(t *testing.T) {
	var s Instances
	vm, _ := s.Add("a", mustCompile(t, progField1), 64, 1)
	s.Observe(1, [][]byte{msg(1, "before")})
	c := s.CloneReadOnly()
	if !c.ReadOnly() || s.ReadOnly() || c.Len() != 1 || c.Generation() != s.Generation() || c.Stats() != s.Stats() {
		t.Fatalf("clone: ro %v len %d gen %d stats %+v", c.ReadOnly(), c.Len(), c.Generation(), c.Stats())
	}
	before := s.AppendProtoVMsField(nil)
	if got := c.AppendProtoVMsField(nil); !bytes.Equal(got, before) {
		t.Fatalf("clone emits %x, want %x", got, before)
	}
	// The original keeps running; the clone stays frozen.
	s.Observe(1, [][]byte{msg(1, "after")})
	if got := c.AppendProtoVMsField(nil); !bytes.Equal(got, before) {
		t.Fatal("clone changed with the original")
	}
	if !bytes.Equal(vm.SerializeIncrementalState(nil), msg(1, "after")) {
		t.Fatal("original did not apply the patch")
	}
	c.Observe(1, [][]byte{msg(1, "to clone")})
	if st := c.Stats(); st.PatchesAbort != 1 || st.PacketsUnfolded != 1 || c.Generation() != 1 {
		t.Fatalf("clone after Observe: %+v gen %d", st, c.Generation())
	}
	if _, err := c.Add("b", mustCompile(t, progField2), 64, 1); err == nil || c.Len() != 1 {
		t.Fatal("Add on a read-only clone succeeded")
	}
	// Producer sets are not shared.
	s.Add("a", mustCompile(t, progField1), 64, 2)
	if len(c.list[0].producers) != 1 {
		t.Fatal("clone shares the producer set")
	}
}

// TestProtoVMInstancesObserveNoAlloc checks that Observe does not allocate
// in steady state, for whole and fragmented small packets, whatever the
// outcome (Ok, Error, unrouted).
func TestProtoVMInstancesObserveNoAlloc(t *testing.T) {
	prog, err := Compile(internedNamesYAML(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	var s Instances
	s.Add("synthetic", prog, 1024, 1)
	pkts := observeBenchPackets()
	for i := 0; i < 64; i++ { // warm-up: state holds every key, scratch grown
		s.Observe(1, pkts[i%len(pkts)])
	}
	i := 0
	allocs := testing.AllocsPerRun(500, func() {
		s.Observe(1, pkts[i%len(pkts)])
		s.Observe(2, pkts[i%len(pkts)]) // unrouted
		i++
	})
	if allocs != 0 {
		t.Fatalf("Observe allocates %.1f times per call pair, want 0", allocs)
	}
	if st := s.Stats(); st.PatchesError == 0 || st.PatchesOk == 0 || st.PacketsUnrouted == 0 || st.PatchesAbort != 0 {
		t.Fatalf("the packets did not exercise Ok, Error and unrouted: %+v", st)
	}
}

// observeBenchPackets are small TracePackets as the synthetic data source
// writes them, each split in two or three fragments: 8 with interned names
// (cycling over 16 iids) and one without interned data.
func observeBenchPackets() [][][]byte {
	var out [][][]byte
	for k := 0; k < 8; k++ {
		p := msg(8, 1000+k, 12, msg(2, msg(1, 2*k+1, 2, "name-a"), 2, msg(1, 2*k+2, 2, "name-b")), 11, msg(10, k+1))
		out = append(out, [][]byte{p[:5], p[5:20], p[20:]})
	}
	p := msg(8, 5, 11, msg(10, 3, 9, 1))
	out = append(out, [][]byte{p[:3], p[3:]})
	return out
}

func benchObserveOverwrite(b *testing.B) {
	prog, err := Compile(internedNamesYAML(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	var s Instances
	s.Add("synthetic", prog, 1024, 1)
	pkts := observeBenchPackets()
	for i := 0; i < 64; i++ {
		s.Observe(1, pkts[i%len(pkts)])
	}
	n := 0
	for _, f := range pkts[0] {
		n += len(f)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Observe(1, pkts[i%len(pkts)])
	}
}
