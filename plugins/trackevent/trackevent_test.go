package trackevent

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/smb"
)

// rig is one TraceWriter on a heap SMB whose commits are read back into
// whole packets (the test writes less than a chunk per flush, so no
// packet spans chunks).
type rig struct {
	w       *smb.TraceWriter
	keep    bool // collect packets (tests); benchmarks only free chunks
	packets [][]byte
}

func newRig(tb testing.TB) *rig {
	s, err := smb.NewHeapSMB(smb.DefaultShmSize, smb.DefaultPageSize)
	if err != nil {
		tb.Fatal(err)
	}
	r := &rig{}
	rd := smb.NewReader(s)
	arb, err := smb.NewArbiter(s, smb.ArbiterOptions{OnCommit: func(cd *smb.CommitData) {
		rd.ReadCommit(cd, func(v *smb.ChunkView) {
			if !r.keep {
				return
			}
			b := v.Payload
			for range v.Fragments {
				size, n := protowire.ConsumeVarint(b)
				b = b[n:]
				if size > 0 {
					r.packets = append(r.packets, append([]byte(nil), b[:size]...))
				}
				b = b[size:]
			}
		}, nil)
	}})
	if err != nil {
		tb.Fatal(err)
	}
	if r.w, err = arb.NewTraceWriter(1, smb.Drop); err != nil {
		tb.Fatal(err)
	}
	return r
}

// fields decodes a message into field number → values (varints as
// uint64, bytes as []byte), failing on malformed input.
func fields(t *testing.T, b []byte) map[protowire.Number][]any {
	t.Helper()
	out := map[protowire.Number][]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag in %x", b)
		}
		b = b[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				t.Fatal("bad varint")
			}
			out[num] = append(out[num], v)
			b = b[n:]
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				t.Fatal("bad bytes")
			}
			out[num] = append(out[num], v)
			b = b[n:]
		default:
			t.Fatalf("unexpected wire type %d", typ)
		}
	}
	return out
}

func TestSlicesCountersInterning(t *testing.T) {
	r := newRig(t)
	r.keep = true
	tw := New(r.w)
	if err := tw.Track(7, "worker"); err != nil {
		t.Fatal(err)
	}
	if err := tw.CounterTrack(8, "queue"); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(tw.Begin(100, 7, "work"))
	must(tw.End(200, 7))
	must(tw.Begin(300, 7, "work")) // interned: no new name
	must(tw.End(400, 7))
	must(tw.Counter(500, 8, -3))
	tw.ClearIncrementalState()
	must(tw.Instant(600, 7, "work")) // re-interned after the clear
	must(r.w.Flush())

	if len(r.packets) != 10 {
		t.Fatalf("%d packets, want 2 descriptors, 5 events, 2 descriptors again, 1 event", len(r.packets))
	}
	type want struct {
		ts, flags, typ, track, iid uint64
		name                       string // interned in this packet
		counter                    int64
	}
	check := func(i int, w want) {
		t.Helper()
		p := fields(t, r.packets[i])
		if p[8][0].(uint64) != w.ts || p[13][0].(uint64) != w.flags {
			t.Fatalf("packet %d: ts %v flags %v, want %d %d", i, p[8], p[13], w.ts, w.flags)
		}
		if w.name != "" {
			en := fields(t, fields(t, p[12][0].([]byte))[2][0].([]byte))
			if en[1][0].(uint64) != w.iid || string(en[2][0].([]byte)) != w.name {
				t.Fatalf("packet %d: interned %v", i, en)
			}
		} else if len(p[12]) != 0 {
			t.Fatalf("packet %d interns again", i)
		}
		e := fields(t, p[11][0].([]byte))
		if e[9][0].(uint64) != w.typ || e[11][0].(uint64) != w.track {
			t.Fatalf("packet %d: track event %v", i, e)
		}
		if w.iid != 0 && e[10][0].(uint64) != w.iid {
			t.Fatalf("packet %d: name_iid %v", i, e[10])
		}
		if w.typ == typeCounter && int64(e[30][0].(uint64)) != w.counter {
			t.Fatalf("packet %d: counter %v", i, e[30])
		}
	}
	desc := func(i int, uuid uint64, name string, counter bool) {
		t.Helper()
		d := fields(t, fields(t, r.packets[i])[60][0].([]byte))
		if d[1][0].(uint64) != uuid || string(d[2][0].([]byte)) != name || (len(d[8]) == 1) != counter {
			t.Fatalf("packet %d: descriptor %v", i, d)
		}
	}
	desc(0, 7, "worker", false)
	desc(1, 8, "queue", true)
	check(2, want{ts: 100, flags: 3, typ: typeSliceBegin, track: 7, iid: 1, name: "work"})
	check(3, want{ts: 200, flags: 2, typ: typeSliceEnd, track: 7})
	check(4, want{ts: 300, flags: 2, typ: typeSliceBegin, track: 7, iid: 1})
	check(5, want{ts: 400, flags: 2, typ: typeSliceEnd, track: 7})
	check(6, want{ts: 500, flags: 2, typ: typeCounter, track: 8, counter: -3})
	desc(7, 7, "worker", false)
	desc(8, 8, "queue", true)
	check(9, want{ts: 600, flags: 3, typ: typeInstant, track: 7, iid: 1, name: "work"})
}

// write64 writes a 64-byte TrackEvent packet (slice begin with an inline
// name) through the message API.
func write64(w *smb.TraceWriter, ts uint64) error {
	p := w.NewTracePacket()
	p.AppendVarint(pktTimestamp, ts)
	e := p.BeginNested(pktTrackEvent)
	e.AppendVarint(teType, typeSliceBegin)
	e.AppendVarint(teTrackUUID, 1<<40)
	e.AppendString(23, "a-64-byte-track-event-name-to-pad-it-to-s")
	return p.Finish()
}

func TestWrite64IsSixtyFourBytes(t *testing.T) {
	r := newRig(t)
	r.keep = true
	// The first packet of a sequence also carries first_packet_on_sequence;
	// the steady-state packet is the second.
	for i := range 2 {
		if err := write64(r.w, 1<<50+uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.w.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(r.packets) != 2 || len(r.packets[1]) != 64 {
		t.Fatalf("packets %d, want 2, the second of 64 bytes: %x", len(r.packets), r.packets)
	}
}

// BenchmarkTrackEvent64B: a 64 B TrackEvent written field by field into
// chunk memory (target: <= 40 ns, 0 allocs); the reader frees chunks
// inline, as the service does.
func BenchmarkTrackEvent64B(b *testing.B) {
	r := newRig(b)
	b.SetBytes(64)
	b.ReportAllocs()
	ts := uint64(1 << 50)
	for i := 0; b.Loop(); i++ {
		if err := write64(r.w, ts+uint64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSliceBegin: trackevent.Writer.Begin with an interned name.
func BenchmarkSliceBegin(b *testing.B) {
	r := newRig(b)
	tw := New(r.w)
	b.ReportAllocs()
	ts := uint64(1 << 50)
	for i := 0; b.Loop(); i++ {
		if err := tw.Begin(ts+uint64(i), 1<<40, "work"); err != nil {
			b.Fatal(err)
		}
	}
}
