package buffer

// The fragment tokenizer shared by copy, read and overwrite. A chunk payload
// is a run of fragments, each a protobuf varint length followed by that many
// bytes. Its contents come from producers and are untrusted.

// Tokenizer results.
const (
	tokOK      = iota // a fragment was found
	tokEnd            // no bytes left
	tokCorrupt        // bad varint or a size running past the end
	tokDrop           // the writer's packet-drop sentinel (0x0FFFFFFF)
)

// packetSizeDropPacket is the fragment size a TraceWriter writes to say it
// dropped data because the SMB was full.
const packetSizeDropPacket = 0x0FFFFFFF

// nextFragment parses the fragment at off in p. On tokOK, the fragment data
// is p[data:end].
func nextFragment(p []byte, off int) (data, end int, st int) {
	n := len(p)
	if off >= n {
		return 0, 0, tokEnd
	}
	// Fast path: one-byte header.
	c := p[off]
	var v uint64
	i := off + 1
	if c < 0x80 {
		v = uint64(c)
	} else {
		v = uint64(c & 0x7f)
		shift := uint(7)
		for {
			if i >= n || shift >= 64 {
				return 0, 0, tokCorrupt
			}
			c = p[i]
			i++
			v |= uint64(c&0x7f) << shift
			if c < 0x80 {
				break
			}
			shift += 7
		}
	}
	if v == packetSizeDropPacket {
		return 0, 0, tokDrop
	}
	if v > uint64(n-i) {
		return 0, 0, tokCorrupt
	}
	return i, i + int(v), tokOK
}

// Fragment types.
const (
	fragWhole    = iota // a complete packet
	fragBegin           // first fragment of a packet continuing in the next chunk
	fragContinue        // middle fragment
	fragEndPart         // last fragment of a packet started in a previous chunk
)

// fragType classifies a fragment by its position in the chunk (first: it
// starts at payload offset 0; last: it ends at the end of the valid payload)
// and the chunk flags.
func fragType(first, last bool, flags uint8) int {
	cf := flags&flagFirstContinues != 0
	cl := flags&flagLastContinues != 0
	switch {
	case first && last && cf && cl:
		return fragContinue
	case first && cf:
		return fragEndPart
	case last && cl:
		return fragBegin
	}
	return fragWhole
}

// shortFragment decodes the one- or two-byte size header at off (packets
// under 16 KiB: nearly all of them) without a call: it is small enough to
// inline into the overwrite and copy loops. It returns data == 0 when the
// header is longer, or off is within a byte of the end, and the fragment
// must go to nextFragment; the caller still checks end against len(p).
func shortFragment(p []byte, off int) (data, end int) {
	if off+1 >= len(p) {
		return 0, 0
	}
	c0, c1 := p[off], p[off+1]
	if c0 < 0x80 {
		return off + 1, off + 1 + int(c0)
	}
	if c1 < 0x80 {
		return off + 2, off + 2 + (int(c0&0x7f) | int(c1)<<7)
	}
	return 0, 0
}
