package smb

// Compact-first packets.
//
// A packet's size, and a nested message's, is reserved as 4 bytes (a
// redundant varint: the size is known only at the end) and, when the packet
// or message turns out to be at most 127 bytes and still in one piece, is
// shrunk to 1 byte by moving the bytes after it back (finishPacket,
// endFrame, compactLastNested). Those moves are most of the cost of a small
// packet such as a TrackEvent. A packet started by NewTracePacket is
// therefore written as if that shrinking had already happened: 1 byte
// reserved for its size and, for its first nested message, 1 byte for that
// message's size. When it finishes in the shape compactLastNested (or
// finishPacket's own shrinking) handles, only the size bytes and the stale
// bytes those moves would have left behind are written: the chunk ends up
// byte for byte as with the 4-byte layout. Anything else (a second or
// deeper nested message, closing the nested message before the end, a
// field that does not fit the chunk, a packet that grows past 127 bytes,
// any method without a compact-first path) first moves the packet into
// the 4-byte layout (expand), and the ordinary code takes over.
//
// The compact-first paths are in NewTracePacket, BeginNested,
// AppendVarint, AppendString, AppendBytes and TracePacket.Finish.
//
// While compact, w.shift says how many bytes wp is behind its 4-byte-layout
// position; room checks allow for it (the Append fast paths for the most
// it can be, fastRoom), so a field is written compact-first only where the
// 4-byte layout would have written it in this chunk too.

const (
	compactRoot   = 3 // the packet's size is 1 byte instead of 4
	compactNested = 6 // and so is its one nested message's
)

// expand moves a compact-first packet into the 4-byte layout: the bytes
// and zeroed size fields the 4-byte layout would hold at this point, and
// the fields NewTracePacket's fast path leaves to it (fragStart, posBase:
// nothing is written before a compact-first packet's fields).
func (w *TraceWriter) expand() {
	b, h, wp := w.buf, w.fragHdr, w.wp
	w.fragStart = h + PacketHeaderSize
	w.posBase = -w.fragStart
	if w.shift == compactNested {
		slot := w.nestedSlot
		// Nested content, then the fields before it, move forward.
		copy(b[slot+PacketHeaderSize:], b[slot-compactRoot+1:wp])
		clear(b[slot : slot+PacketHeaderSize])
		copy(b[h+PacketHeaderSize:], b[h+1:slot-compactRoot])
		w.frames = append(w.frames[:1], frame{start: w.posBase + slot + PacketHeaderSize, slot: slot, kind: slotInChunk})
	} else {
		copy(b[h+PacketHeaderSize:], b[h+1:wp])
	}
	clear(b[h : h+PacketHeaderSize])
	w.wp = wp + w.shift
	w.shift = 0
}

// Finish ends the packet and returns the error (if any) hit while writing
// it, for example a Stall writer's timeout. Finishing twice is a no-op.
//
// A compact-first packet that the 4-byte layout would have shrunk
// completely is finished here, without a further call: without a nested
// message, at most 127 bytes (finishPacket's shrinking); with its nested
// message still open, that message 3..127 bytes and the packet at most
// 127 (compactLastNested). Only the size bytes and the bytes those moves
// leave after the packet are written. Any other packet, and a
// compact-first packet ended another way (End, NewTracePacket, Flush), is
// moved into the 4-byte layout and finished by finishPacket.
func (p TracePacket) Finish() error {
	w := p.w
	if w == nil || p.gen() != w.packetGen || !w.inPacket {
		return nil
	}
	if b, h, wp := w.buf, w.fragHdr, w.wp; w.shift != 0 && wp-h-1 <= 127 {
		n := wp - h - 1 // packet size
		if w.shift == compactNested {
			slot := w.nestedSlot - compactRoot
			if c := wp - slot - 1; c >= 3 && c <= 127 { // nested content size
				b[slot] = byte(c)
				// compactLastNested leaves the content's last 3 bytes twice.
				t := (*[9]byte)(b[wp-3 : wp+6])
				t0, t1, t2 := t[0], t[1], t[2]
				t[3], t[4], t[5] = t0, t1, t2
				t[6], t[7], t[8] = t0, t1, t2
			} else {
				w.finishPacket()
				return w.takeErrIfAny()
			}
		} else {
			// finishPacket's move leaves the last 3 bytes of the 4-byte
			// layout: zeros of the size field where the packet is shorter.
			t := (*[6]byte)(b[wp-3 : wp+3])
			switch n {
			case 0:
				t[3], t[4], t[5] = 0, 0, 0
			case 1:
				t[3], t[4], t[5] = 0, 0, t[2]
			case 2:
				t[3], t[4], t[5] = 0, t[1], t[2]
			default:
				t[3], t[4], t[5] = t[0], t[1], t[2]
			}
		}
		b[h] = byte(n)
		w.shift = 0
		w.inPacket = false
		w.packetGen++ // handles of the finished packet go inert
		w.top = noMessage
		// packetDone, inline.
		if wp < len(b) {
			w.inflateCount()
		}
		if w.patchHead != len(w.patchStore) {
			w.sendReadyPatches()
		}
		return w.takeErrIfAny()
	}
	w.finishPacket()
	return w.takeErrIfAny()
}
