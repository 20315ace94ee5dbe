package buffer

import (
	"reflect"
	"testing"
)

// FuzzTraceBuffer lets arbitrary bytes drive CopyChunkUntrusted,
// TryPatchChunkContents, reads and clones on a small buffer. Chunk payloads
// are built from fuzzer-chosen fragment layouts, flags, fragment counts,
// truncations and trailing malformations (oversized, unterminated or
// drop-sentinel headers), but every data byte carries its sequence's tag, so
// a packet returned on one sequence holding another sequence's bytes is
// detected. Checks: no panic, every returned byte is the reported
// sequence's tag (or a header byte, which a misaligned recommit can
// legitimately expose), sequences and clients are ones that were copied,
// Size matches the slices, and Stats never decrease.
func FuzzTraceBuffer(f *testing.F) {
	f.Add([]byte{0x00, 0x00, 1, 2, 3, 0x08, 0, 1, 3, 10, 20, 30, 0, 4})
	f.Add([]byte{0x01, 0x02, 0, 0, 0, 0x02, 0, 2, 5, 64, 7, 1, 0, 2, 1, 7, 0, 1, 2, 1, 7, 4})
	f.Add([]byte{0x00, 0x00, 0, 0, 0x80, 0x06, 0, 1, 40, 0, 1, 3, 0, 0, 0, 2, 1, 9, 0, 4, 7})
	f.Add([]byte{0x02, 0x01, 1, 1, 0, 0x01, 1, 3, 50, 60, 70, 2, 1, 6, 0x01, 1, 1, 0, 0, 0, 2, 1, 1, 1, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		fz := &fuzzRun{t: t, in: data}
		fz.run()
	})
}

// fzTag is the data byte of sequence (p, w), p and w in 1..3; patched bytes
// use fzTag|0x20. Fragment headers are built so that none of their bytes
// fall in 0xC0..0xFE (lengths have bit 6 clear; the drop sentinel is ff).
func fzTag(p, w uint16) byte { return 0xC0 + byte((p-1)*3+(w-1)) }

func fzIsTag(c byte) bool { return c >= 0xC0 && c != 0xFF }

type fuzzRun struct {
	t    *testing.T
	in   []byte
	pos  int
	b    *TraceBuffer
	prev Stats
	seen map[uint32]ClientIdentity
}

func (f *fuzzRun) next() byte {
	if f.pos >= len(f.in) {
		return 0
	}
	c := f.in[f.pos]
	f.pos++
	return c
}

func (f *fuzzRun) run() {
	cfg := f.next()
	size := 4096 * (1 + int(cfg&1))
	policy := RingBuffer
	if cfg&2 != 0 {
		policy = Discard
	}
	b, err := New(size, policy)
	if err != nil {
		f.t.Fatal(err)
	}
	f.b = b
	f.seen = map[uint32]ClientIdentity{}
	observe := cfg&4 == 0
	if observe {
		b.SetOverwriteObserver(func(seq SequenceProperties, packet [][]byte) {
			f.checkPacket("observed", seq, packet)
		})
	}
	for ops := 0; f.pos < len(f.in) && ops < 200; ops++ {
		switch op := f.next(); op % 8 {
		case 0, 1, 2:
			f.copyOp()
		case 3:
			f.patchOp()
		case 4, 5:
			f.readOp(b, -1, true)
		case 6:
			f.readOp(b, 1+int(f.next()%4), true)
		case 7:
			c := b.CloneReadOnly()
			if c.UsedSize() != b.UsedSize() || c.Size() != b.Size() {
				f.t.Fatalf("clone used/size %d/%d, source %d/%d", c.UsedSize(), c.Size(), b.UsedSize(), b.Size())
			}
			f.readOp(c, -1, false)
		}
		f.checkStats()
	}
	f.readOp(b, -1, true)
	f.checkStats()
	if b.UsedSize() > b.Size() {
		f.t.Fatalf("UsedSize %d > Size %d", b.UsedSize(), b.Size())
	}
	for i := b.UsedSize(); i < len(b.mem); i++ {
		if b.mem[i] != 0 {
			f.t.Fatalf("byte %d above UsedSize %d is %#x", i, b.UsedSize(), b.mem[i])
		}
	}
}

func (f *fuzzRun) seq() (p, w uint16) {
	c := f.next()
	return 1 + uint16(c%3), 1 + uint16(c/3%3)
}

func (f *fuzzRun) chunkID() uint32 {
	c := f.next()
	if c&0x80 != 0 {
		return 0xFFFFFFF0 + uint32(c&0x1F) // near the wrap
	}
	return uint32(c)
}

// fzLen turns a byte into a fragment length whose varint bytes avoid the
// tag range: bit 6 of the low 7 bits is always clear.
func fzLen(c, d byte) int {
	n := int(c&0x3F) | int(d&0x07)<<7
	return n
}

func fzAppendHeader(dst []byte, n int, redundant bool) []byte {
	if redundant {
		return append(dst, byte(n)|0x80, byte(n>>7)|0x80, byte(n>>14)|0x80, byte(n>>21))
	}
	for n >= 0x80 {
		dst = append(dst, byte(n)|0x80)
		n >>= 7
	}
	return append(dst, byte(n))
}

func (f *fuzzRun) copyOp() {
	p, w := f.seq()
	id := f.chunkID()
	ctl := f.next()
	flags := ctl & 0x07
	complete := ctl&0x08 == 0
	tag := fzTag(p, w)
	var payload []byte
	nfr := int(f.next() % 9)
	for i := 0; i < nfr; i++ {
		lc := f.next()
		n := fzLen(lc, f.next())
		payload = fzAppendHeader(payload, n, lc&0x40 != 0)
		for j := 0; j < n; j++ {
			payload = append(payload, tag)
		}
	}
	declared := nfr
	switch d := ctl >> 6; d {
	case 1:
		declared += 1 + int(f.next()%3) // claims more than present
	case 2:
		declared -= min(declared, 1+int(f.next()%2))
	}
	switch tr := f.next() % 8; tr {
	case 1: // trailing zero padding
		payload = append(payload, make([]byte, int(f.next()))...)
	case 2: // writer drop sentinel
		payload = append(payload, 0xff, 0xff, 0xff, 0x7f)
		declared++
	case 3: // unterminated varint at the end
		payload = append(payload, 0x82)
		declared++
	case 4: // header larger than what follows
		payload = append(payload, 0xBF, 0x3F, tag, tag)
		declared++
	case 5: // truncated (scrape-like) and padded with tag bytes
		if len(payload) > 0 {
			at := int(f.next()) * len(payload) / 256
			pad := len(payload) - at + int(f.next())
			payload = payload[:at]
			for j := 0; j < pad; j++ {
				payload = append(payload, tag)
			}
		}
	case 6: // very long chunk
		extra := int(f.next()) * 40
		payload = fzAppendHeader(payload, extra&^0x40, false)
		for j := 0; j < extra&^0x40; j++ {
			payload = append(payload, tag)
		}
		declared++
	}
	client := ClientIdentity{UID: int32(1000 + p), PID: int32(100 + p)}
	f.seen[seqKey(p, w)] = client
	f.b.CopyChunkUntrusted(p, client, w, id, uint16(declared), flags, complete, payload)
}

func (f *fuzzRun) patchOp() {
	p, w := f.seq()
	id := f.chunkID()
	ctl := f.next()
	n := 1 + int(ctl%3)
	tag := fzTag(p, w) | 0x20
	patches := make([]Patch, n)
	for i := range patches {
		off := uint32(f.next()) | uint32(f.next())<<8
		if ctl&0x80 != 0 && i == 0 {
			off = -uint32(f.next()) // wraps below zero
		}
		patches[i] = Patch{Offset: off, Data: [4]byte{tag, tag, tag, tag}}
	}
	f.b.TryPatchChunkContents(p, w, id, patches, ctl&0x08 != 0)
}

func (f *fuzzRun) readOp(b *TraceBuffer, limit int, source bool) {
	b.BeginRead()
	for i := 0; limit < 0 || i < limit; i++ {
		if i > 100000 {
			f.t.Fatal("read pass does not end")
		}
		var p Packet
		if !b.ReadNextTracePacket(&p) {
			return
		}
		f.checkPacket("read", p.Seq, p.Slices)
		total := 0
		for _, s := range p.Slices {
			total += len(s)
		}
		if p.Size() != total || len(p.AppendTo(nil)) != total {
			f.t.Fatalf("Size %d / AppendTo %d, slices hold %d", p.Size(), len(p.AppendTo(nil)), total)
		}
		if p.PreviousPacketDropped != 0 && p.PreviousPacketDropped&LossPresent == 0 {
			f.t.Fatalf("dropped %#x without LossPresent", p.PreviousPacketDropped)
		}
		if p.PreviousPacketDropped >= 512 {
			f.t.Fatalf("dropped %#x has unknown bits", p.PreviousPacketDropped)
		}
		if source {
			f.checkStats()
		}
	}
}

func (f *fuzzRun) checkPacket(what string, seq SequenceProperties, slices [][]byte) {
	client, ok := f.seen[seqKey(seq.ProducerID, seq.WriterID)]
	if !ok {
		f.t.Fatalf("%s packet on sequence (%d,%d) that was never copied", what, seq.ProducerID, seq.WriterID)
	}
	if seq.Client != client {
		f.t.Fatalf("%s packet on (%d,%d) with client %+v, want %+v", what, seq.ProducerID, seq.WriterID, seq.Client, client)
	}
	tag := fzTag(seq.ProducerID, seq.WriterID)
	for i, s := range slices {
		if len(s) == 0 {
			f.t.Fatalf("%s packet on (%d,%d): empty slice %d", what, seq.ProducerID, seq.WriterID, i)
		}
		for j, c := range s {
			if fzIsTag(c) && c != tag && c != tag|0x20 {
				f.t.Fatalf("%s packet on (%d,%d): slice %d byte %d is %#x, a byte of another sequence (tag %#x)",
					what, seq.ProducerID, seq.WriterID, i, j, c, tag)
			}
		}
	}
}

func (f *fuzzRun) checkStats() {
	cur := f.b.Stats()
	a, b := reflect.ValueOf(f.prev), reflect.ValueOf(cur)
	for i := 0; i < a.NumField(); i++ {
		if b.Field(i).Uint() < a.Field(i).Uint() {
			f.t.Fatalf("Stats.%s decreased from %d to %d", a.Type().Field(i).Name, a.Field(i).Uint(), b.Field(i).Uint())
		}
	}
	f.prev = cur
}
