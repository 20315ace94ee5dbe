package smb

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestCompactFirstMatchesFourByteLayout writes the same random packets
// with compact-first writing on and off (normalLayoutOnly) and requires the
// two SMBs to be equal byte for byte after every packet, stale bytes
// included, and the reassembled packets to be equal. The packets cover
// what compact-first handles itself (fields before and inside one nested
// message, finishing with it open) and everything that makes it fall back
// to the 4-byte layout: nested messages closed early or nested deeper,
// fields after a nested message, fixed and raw fields, fields of every
// tag and varint length, strings that do not fit the chunk, packets over
// 127 bytes and across chunks, and packets ended by NewTracePacket,
// WritePacket, End on the root or Flush instead of Finish.
func TestCompactFirstMatchesFourByteLayout(t *testing.T) {
	fast, ref := newCompactRig(t), newCompactRig(t)
	ref.w.normalLayoutOnly = true
	if fast.w.normalLayoutOnly {
		t.Fatal("the rig's writer has compact-first writing off")
	}
	r := rand.New(rand.NewPCG(7, 11))
	fields := []uint32{1, 2, 8, 11, 15, 16, 23, 60, 127, 900, 2047, 2048, 70000}
	varint := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return uint64(r.IntN(128))
		case 1:
			return uint64(r.IntN(1 << 14))
		case 2:
			return r.Uint64() >> r.IntN(64)
		}
		return 1 << 50
	}
	str := func() string {
		n := r.IntN(40)
		if r.IntN(10) == 0 {
			n = r.IntN(2000)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	// field appends one random field to m.
	field := func(m Message) {
		f := fields[r.IntN(len(fields))]
		switch r.IntN(8) {
		case 0, 1, 2:
			m.AppendVarint(f, varint())
		case 3, 4:
			m.AppendString(f, str())
		case 5:
			m.AppendBytes(f, []byte(str()))
		case 6:
			m.AppendFixed64(f, r.Uint64())
		default:
			m.AppendSint(f, -int64(varint()>>1))
		}
	}
	type op struct {
		kind int
		seed uint64
	}
	// packet writes one packet from seed on w (both writers get the same
	// calls because each packet's choices come from its own seed).
	packet := func(w *TraceWriter, seed uint64) {
		r = rand.New(rand.NewPCG(seed, 3))
		if r.IntN(12) == 0 {
			b := []byte(str())
			w.WritePacket(b)
			return
		}
		p := w.NewTracePacket()
		for range r.IntN(4) {
			field(p.Message)
		}
		if r.IntN(4) != 0 {
			n := p.BeginNested(fields[r.IntN(len(fields))])
			for range r.IntN(5) {
				field(n)
			}
			if r.IntN(6) == 0 {
				d := n.BeginNested(2)
				field(d)
				if r.IntN(2) == 0 {
					d.End()
				}
				if r.IntN(2) == 0 {
					field(n)
				}
			}
			if r.IntN(6) == 0 {
				n.End()
			}
			if r.IntN(6) == 0 {
				field(p.Message) // closes the nested message
			}
		}
		switch r.IntN(10) {
		case 0: // left open: the next packet or the flush ends it
		case 1:
			p.End()
		default:
			p.Finish()
		}
	}
	var ops []op
	for i := range 3000 {
		k := 0
		if i%17 == 16 {
			k = 1 // flush
		}
		ops = append(ops, op{k, uint64(i)})
	}
	for i, o := range ops {
		for _, rg := range []*compactRig{fast, ref} {
			if o.kind == 1 {
				if err := rg.w.Flush(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			packet(rg.w, o.seed)
		}
		if fast.w.inPacket != ref.w.inPacket {
			t.Fatalf("op %d: a packet is open in one writer only", i)
		}
		// An open packet's bytes differ (its sizes are not written yet,
		// and scraping ignores a chunk's last fragment); compare the SMBs
		// whenever no packet is open.
		if !fast.w.inPacket && !bytes.Equal(fast.s.Bytes(), ref.s.Bytes()) {
			a, b := fast.s.Bytes(), ref.s.Bytes()
			for j := range a {
				if a[j] != b[j] {
					t.Logf("fast % x\nref  % x", a[max(0, j-24):j+24], b[max(0, j-24):j+24])
					t.Fatalf("op %d (seed %d): the SMBs differ first at byte %#x: %02x, 4-byte layout %02x",
						i, o.seed, j, a[j], b[j])
				}
			}
		}
	}
	fast.w.Flush()
	ref.w.Flush()
	if !bytes.Equal(fast.s.Bytes(), ref.s.Bytes()) {
		t.Fatal("the SMBs differ after the last flush")
	}
	if len(fast.packets) != len(ref.packets) || len(ref.packets) < 2500 {
		t.Fatalf("read %d and %d packets", len(fast.packets), len(ref.packets))
	}
	for i := range fast.packets {
		if !bytes.Equal(fast.packets[i], ref.packets[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if fast.rej() != 0 || ref.rej() != 0 {
		t.Fatal("the reader rejected chunks")
	}
}
