package smb

import (
	"encoding/binary"
	"math"
)

// Message is a handle on an open proto message of the packet a TraceWriter
// is writing: the root TracePacket or a nested message. Fields are appended
// straight into chunk memory. Writing a field of a message closes its open
// nested messages first (as protozero does). Handles of finished packets
// or closed messages are inert: their writes are ignored. Message is a
// small value; copying it is free and allocation-free.
type Message struct {
	w   *TraceWriter
	key uint64 // msgKey(packet generation, index in w.frames)
}

// noMessage is TraceWriter.top between packets; no Message has this key.
const noMessage = ^uint64(0)

func msgKey(gen uint32, level int) uint64 { return uint64(gen)<<32 | uint64(uint32(level)) }

func (m Message) gen() uint32 { return uint32(m.key >> 32) }
func (m Message) level() int  { return int(uint32(m.key)) }

// TracePacket is the handle NewTracePacket returns: the root Message plus
// Finish.
type TracePacket struct {
	Message
}

// Finish is in compact.go: its body is compact-first's end.

// prep checks m is still open and closes its open children. The common
// case, writing to the innermost open message, is one inlined comparison
// with the writer's top key.
func (m Message) prep() *TraceWriter {
	if w := m.w; w != nil && m.key == w.top {
		return w
	}
	return m.prepSlow()
}

func (m Message) prepSlow() *TraceWriter {
	w := m.w
	if w == nil || m.gen() != w.packetGen || !w.inPacket {
		return nil
	}
	if w.shift != 0 {
		w.expand() // closing a message needs the 4-byte layout (and its frames)
	}
	if m.level() >= len(w.frames) {
		return nil
	}
	for m.level() < len(w.frames)-1 {
		w.endFrame()
	}
	return w
}

// prepNormal is prep for the methods without a compact-first fast path:
// the packet is put back into the 4-byte layout first (compact.go).
func (m Message) prepNormal() *TraceWriter {
	w := m.prep()
	if w != nil && w.shift != 0 {
		w.expand()
	}
	return w
}

func tag(field uint32, wireType uint32) uint64 { return uint64(field)<<3 | uint64(wireType) }

// fastRoom is the room the fast paths of AppendVarint, AppendString and
// AppendBytes need after the write offset: 20 bytes (a tag of up to 10,
// a varint of up to 10) plus the most a compact-first packet is behind
// the 4-byte layout (compactNested), so that they write compact-first
// only where the 4-byte layout would have written in this chunk too,
// without reading w.shift. Near the end of a chunk the slow path decides.
const fastRoom = 20 + compactNested

// AppendVarint appends a varint field (int32/int64/uint32/uint64/enum
// encodings; pass negative int64 values converted with uint64()).
//
// With fastRoom bytes of room (nearly always) the tag and the value are
// encoded here without a call: tags of fields below 2048 take one or two
// bytes, values below 2^56 at most eight (varintWord and putVarintWord,
// inlined).
func (m Message) AppendVarint(field uint32, v uint64) {
	if w := m.w; w != nil && m.key == w.top {
		if buf, wp := w.buf, w.wp; len(buf)-wp >= fastRoom && field < 1<<11 && v < 1<<56 {
			b := (*[20]byte)(buf[wp : wp+20])
			n := putTag14((*[2]byte)(b[:2]), tag(field, 0))
			if v < 1<<7 {
				b[n] = byte(v)
				w.wp = wp + n + 1
				return
			}
			x, k := varintWord(v)
			putVarintWord((*[8]byte)(b[n:n+8]), x, k)
			w.wp = wp + n + k
			return
		}
	}
	// Everything else ends in one call, so the fast path above keeps
	// its arguments in registers.
	m.appendVarintSlow(field, v)
}

func (m Message) appendVarintSlow(field uint32, v uint64) {
	if w := m.prepNormal(); w != nil {
		w.putTagVarint(tag(field, 0), v)
	}
}

// AppendBool appends a bool field.
func (m Message) AppendBool(field uint32, v bool) {
	var x uint64
	if v {
		x = 1
	}
	m.AppendVarint(field, x)
}

// AppendSint appends a zigzag-encoded sint32/sint64 field.
func (m Message) AppendSint(field uint32, v int64) {
	m.AppendVarint(field, uint64(v<<1)^uint64(v>>63))
}

// AppendFixed32 appends a fixed32/sfixed32 field.
func (m Message) AppendFixed32(field uint32, v uint32) {
	if w := m.prepNormal(); w != nil {
		w.writeVarint(tag(field, 5))
		b := [4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
		w.write(b[:])
	}
}

// AppendFixed64 appends a fixed64/sfixed64 field.
func (m Message) AppendFixed64(field uint32, v uint64) {
	if w := m.prepNormal(); w != nil {
		w.writeVarint(tag(field, 1))
		var b [8]byte
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		w.write(b[:])
	}
}

// AppendFloat appends a float field.
func (m Message) AppendFloat(field uint32, v float32) { m.AppendFixed32(field, math.Float32bits(v)) }

// AppendDouble appends a double field.
func (m Message) AppendDouble(field uint32, v float64) { m.AppendFixed64(field, math.Float64bits(v)) }

// AppendBytes appends a bytes (or pre-encoded message) field. Its fast
// path is AppendString's.
func (m Message) AppendBytes(field uint32, b []byte) {
	if w := m.w; w != nil && m.key == w.top {
		if buf, wp := w.buf, w.wp; len(b) < 128 && len(buf)-wp >= fastRoom+len(b) && field < 1<<11 {
			h := (*[3]byte)(buf[wp : wp+3])
			n := putTag14((*[2]byte)(h[:2]), tag(field, 2))
			h[n] = byte(len(b))
			wp += n + 1
			copy(buf[wp:wp+len(b)], b)
			w.wp = wp + len(b)
			return
		}
	}
	m.appendBytesSlow(field, b)
}

func (m Message) appendBytesSlow(field uint32, b []byte) {
	if w := m.prepNormal(); w != nil {
		w.putTagVarint(tag(field, 2), uint64(len(b)))
		w.write(b)
	}
}

// AppendString appends a string field.
//
// A string under 128 bytes (its length one byte) is written here when the
// chunk has room; a longer one takes the out-of-line path, which for a
// compact-first packet (compact.go) is no loss: the packet is over 127
// bytes, so it would have been moved into the 4-byte layout at Finish.
func (m Message) AppendString(field uint32, s string) {
	if w := m.w; w != nil && m.key == w.top {
		if buf, wp := w.buf, w.wp; len(s) < 128 && len(buf)-wp >= fastRoom+len(s) && field < 1<<11 {
			h := (*[3]byte)(buf[wp : wp+3])
			n := putTag14((*[2]byte)(h[:2]), tag(field, 2))
			h[n] = byte(len(s))
			wp += n + 1
			copy(buf[wp:wp+len(s)], s)
			w.wp = wp + len(s)
			return
		}
	}
	m.appendStringSlow(field, s)
}

func (m Message) appendStringSlow(field uint32, s string) {
	if w := m.prepNormal(); w != nil {
		w.putTagVarint(tag(field, 2), uint64(len(s)))
		w.writeString(s)
	}
}

// AppendRaw appends already encoded fields verbatim.
func (m Message) AppendRaw(b []byte) {
	if w := m.prepNormal(); w != nil {
		w.write(b)
	}
}

// BeginNested opens a nested message field. Its 4-byte size is reserved
// now and filled when it is closed (by End, by writing to an enclosing
// message, or by finishing the packet): in place if its chunk is still
// owned, else through a patch in CommitData.ChunksToPatch.
func (m Message) BeginNested(field uint32) Message {
	if w := m.w; w != nil && m.key == w.top && w.shift == compactRoot && field < 1<<11 {
		// The packet's first nested message, compact-first (compact.go),
		// where the 4-byte layout would have had room for it in this chunk.
		// Its frame is added by expand, if the packet gets there.
		if buf, wp := w.buf, w.wp; len(buf)-compactRoot-wp >= 10+PacketHeaderSize {
			h := (*[3]byte)(buf[wp : wp+3])
			n := putTag14((*[2]byte)(h[:2]), tag(field, 2))
			h[n] = 0
			w.nestedSlot = wp + n + compactRoot // where the 4-byte layout has the size
			w.wp = wp + n + 1
			w.shift = compactNested
			w.top = msgKey(w.packetGen, 1)
			return Message{w: w, key: w.top}
		}
	}
	// Everything else ends in one call, as in AppendVarint.
	return m.beginNestedSlow(field)
}

func (m Message) beginNestedSlow(field uint32) Message {
	w := m.prep()
	if w == nil {
		return Message{}
	}
	if w.shift != 0 {
		w.expand()
	}
	kind := slotInChunk
	if wp := w.wp; len(w.buf)-wp >= 10+PacketHeaderSize && !w.dropping {
		wp += putVarint10((*[10]byte)(w.buf[wp:]), tag(field, 2))
		binary.LittleEndian.PutUint32(w.buf[wp:], 0)
		w.wp = wp + PacketHeaderSize
		w.frames = append(w.frames, frame{start: w.posBase + w.wp, slot: wp, kind: kind})
	} else {
		w.writeVarint(tag(field, 2))
		slot := w.reserveSlot()
		if w.dropping {
			kind = slotNone
		}
		w.frames = append(w.frames, frame{start: w.posBase + w.wp, slot: slot, kind: kind})
	}
	w.top = msgKey(w.packetGen, len(w.frames)-1)
	return Message{w: w, key: w.top}
}

// End closes a nested message (and its open children). On the root
// message it finishes the packet, like TracePacket.Finish without the
// error.
func (m Message) End() {
	w := m.prepNormal()
	if w == nil {
		return
	}
	if m.level() == 0 {
		w.finishPacket()
		return
	}
	w.endFrame()
}
