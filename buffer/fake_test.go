package buffer

import (
	"testing"
)

// fakePacketFragment returns a fragment of n total bytes (varint size header
// included) filled with Perfetto's FakePacketFragment pattern
// (test-vectors.md §2).
func fakePacketFragment(n int, c byte) []byte {
	if n < 1 {
		panic("fakePacketFragment: n must be >= 1")
	}
	var out []byte
	var payload int
	switch {
	case n <= 128:
		payload = n - 1
		out = append(out, byte(payload))
	case n == 129:
		payload = 127
		out = append(out, 0xff, 0x00)
	default:
		payload = n - 2
		out = append(out, byte(payload)|0x80, byte(payload>>7))
	}
	for i := 0; i < payload; i++ {
		switch i % 4 {
		case 0:
			out = append(out, c)
		case 1:
			out = append(out, '0'+byte(i/40%10))
		case 2:
			out = append(out, '0'+byte(i/4%10))
		default:
			out = append(out, '-')
		}
	}
	return out
}

// fakePayload returns the payload bytes (header stripped) of
// fakePacketFragment(n, c), i.e. what a read of that packet yields.
func fakePayload(n int, c byte) string {
	f := fakePacketFragment(n, c)
	switch {
	case n <= 128:
		return string(f[1:])
	default:
		return string(f[2:])
	}
}

// fakeChunk builds one chunk the way Perfetto's FakeChunk does: packets are
// appended with their headers, flags are OR-ed together and num_fragments is
// the number of packets added.
type fakeChunk struct {
	t        testing.TB
	b        *TraceBuffer
	p, w     uint16
	c        uint32
	data     []byte
	nfrags   uint16
	flags    uint8
	complete bool
	client   ClientIdentity
}

// newChunk starts a chunk for (producer p, writer w, chunk id c). The client
// identity is uid 1000+p, pid 100+p, as in the golden scripts.
func newChunk(t testing.TB, b *TraceBuffer, p, w uint16, c uint32) *fakeChunk {
	return &fakeChunk{t: t, b: b, p: p, w: w, c: c, complete: true,
		client: ClientIdentity{UID: 1000 + int32(p), PID: 100 + int32(p)}}
}

// AddPacket appends fakePacketFragment(n, c) and ORs flags into the chunk
// flags.
func (f *fakeChunk) AddPacket(n int, c byte, flags uint8) *fakeChunk {
	return f.AddPacketBytes(fakePacketFragment(n, c), flags)
}

// AddPacketBytes appends raw bytes (header included) as one fragment and ORs
// flags into the chunk flags.
func (f *fakeChunk) AddPacketBytes(data []byte, flags uint8) *fakeChunk {
	f.data = append(f.data, data...)
	f.nfrags++
	f.flags |= flags
	return f
}

// PadTo appends zero bytes until payload+16 == k (Perfetto's PadTo).
func (f *fakeChunk) PadTo(k int) *fakeChunk {
	for len(f.data)+16 < k {
		f.data = append(f.data, 0)
	}
	return f
}

// ClearBytes zeroes n payload bytes starting at off.
func (f *fakeChunk) ClearBytes(off, n int) *fakeChunk {
	for i := off; i < off+n; i++ {
		f.data[i] = 0
	}
	return f
}

// SetFragments overrides the declared fragment count.
func (f *fakeChunk) SetFragments(n uint16) *fakeChunk {
	f.nfrags = n
	return f
}

// SetFlags replaces the chunk flags.
func (f *fakeChunk) SetFlags(flags uint8) *fakeChunk {
	f.flags = flags
	return f
}

// Incomplete marks the chunk as scraped (chunk_complete = false).
func (f *fakeChunk) Incomplete() *fakeChunk {
	f.complete = false
	return f
}

// Bytes returns the payload built so far.
func (f *fakeChunk) Bytes() []byte { return f.data }

// Copy calls CopyChunkUntrusted with the chunk and returns len(payload)+16,
// like Perfetto's CopyIntoTraceBuffer.
func (f *fakeChunk) Copy() int {
	f.b.CopyChunkUntrusted(f.p, f.client, f.w, f.c, f.nfrags, f.flags, f.complete, f.data)
	return len(f.data) + 16
}

// readPacket is one packet read back, flattened for comparisons.
type readPacket struct {
	P, W    uint16
	Dropped uint32
	Data    string
}

// readPackets runs BeginRead and reads every packet the pass yields.
func readPackets(b *TraceBuffer) []readPacket {
	b.BeginRead()
	var out []readPacket
	var p Packet
	for b.ReadNextTracePacket(&p) {
		out = append(out, readPacket{P: p.Seq.ProducerID, W: p.Seq.WriterID,
			Dropped: p.PreviousPacketDropped, Data: string(p.AppendTo(nil))})
	}
	return out
}

// readOne reads a single packet without calling BeginRead; ok is false when
// the pass is over.
func readOne(b *TraceBuffer) (readPacket, bool) {
	var p Packet
	if !b.ReadNextTracePacket(&p) {
		return readPacket{}, false
	}
	return readPacket{P: p.Seq.ProducerID, W: p.Seq.WriterID,
		Dropped: p.PreviousPacketDropped, Data: string(p.AppendTo(nil))}, true
}
