package protovm

// appendState serialises the root: Empty (and a scalar root, which Perfetto
// cannot serialise) → nothing; Bytes → the raw bytes; Message → its fields.
func appendState(dst []byte, root *node) []byte {
	switch root.kind {
	case kBytes:
		return append(dst, root.data...)
	case kMessage:
		for i := range root.ents {
			dst = appendField(dst, uint32(root.ents[i].key), root.ents[i].n)
		}
	}
	return dst
}

// appendField serialises node n as field id: fields of a message in
// ascending id order, repeated elements in ascending index/key order, Empty
// omitted, length prefixes as minimal varints.
func appendField(dst []byte, id uint32, n *node) []byte {
	switch n.kind {
	case kBytes:
		dst = appendTag(dst, id, wireLen)
		dst = appendVarint(dst, uint64(len(n.data)))
		return append(dst, n.data...)
	case kScalar:
		switch n.wire {
		case wireFixed32:
			dst = appendTag(dst, id, wireFixed32)
			v := uint32(n.val)
			return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24))
		case wireFixed64:
			dst = appendTag(dst, id, wireFixed64)
			v := n.val
			return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24),
				byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
		}
		dst = appendTag(dst, id, wireVarint)
		return appendVarint(dst, n.val)
	case kMessage:
		dst = appendTag(dst, id, wireLen)
		// Reserve one byte for the length, then widen if needed.
		lenAt := len(dst)
		dst = append(dst, 0)
		for i := range n.ents {
			dst = appendField(dst, uint32(n.ents[i].key), n.ents[i].n)
		}
		size := len(dst) - lenAt - 1
		if w := varintLen(uint64(size)); w > 1 {
			for k := 1; k < w; k++ {
				dst = append(dst, 0)
			}
			copy(dst[lenAt+w:], dst[lenAt+1:lenAt+1+size])
		}
		var tmp [10]byte
		l := appendVarint(tmp[:0], uint64(size))
		copy(dst[lenAt:], l)
		return dst
	case kIndexed, kMapped:
		for i := range n.ents {
			dst = appendField(dst, id, n.ents[i].n)
		}
	}
	return dst
}
