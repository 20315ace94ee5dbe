package protovm

// This file holds the wire-level field reader shared by the patch cursor, the
// state tree decoder and the merge operation. It reproduces the decoding
// rules of Perfetto's protozero ProtoDecoder, because the golden states depend
// on them: decoding silently stops at the first malformed field (truncated
// varint or payload, wire types 3, 4, 6, 7, field id 0) and fields whose id
// does not fit in 16 bits are skipped.
//
// It does not sit on internal/wire's iterator (protowire's rules), which
// rejects two inputs protozero decodes: a 10-byte varint whose last byte
// is above 1 (protozero keeps the low 64 bits), and a tag whose field
// number needs more than 31 bits (protozero truncates the id to 32 bits
// and skips the field). TestReadFieldKeepsProtozeroRules pins both.

// Wire types as they appear in a proto tag.
const (
	wireVarint  = 0
	wireFixed64 = 1
	wireLen     = 2
	wireFixed32 = 5
)

// maxDecodedFieldID is the largest field id the decoder reports; larger ids
// are skipped like protozero does (its Field keeps the id in 16 bits).
const maxDecodedFieldID = 0xFFFF

// field is one decoded proto field. For wireLen, data is the payload (a
// sub-slice of the decoded buffer); otherwise val holds the raw value
// (fixed32 zero-extended).
type field struct {
	id   uint32
	wire uint8
	val  uint64
	data []byte
}

// parseVarint decodes a varint of at most 10 bytes starting at b[pos]. Bits
// beyond 64 are dropped. ok is false when the varint is truncated or longer
// than 10 bytes.
func parseVarint(b []byte, pos int) (v uint64, next int, ok bool) {
	var shift uint
	for i := pos; i < len(b) && shift < 64; shift += 7 {
		c := b[i]
		i++
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v, i, true
		}
	}
	return 0, pos, false
}

// fieldWalk walks the fields of one message, charging its VM one step
// per field, so that every walk over patch or state bytes is bounded by
// the step budget:
//
//	w := v.walk(b)
//	for w.next() {
//		f := &w.f
//		...
//	}
//	if !w.st.IsOk() { return w.st } // the budget ran out
type fieldWalk struct {
	v   *VM // nil: no budget
	b   []byte
	pos int
	f   field
	st  Status
}

func (v *VM) walk(b []byte) fieldWalk { return fieldWalk{v: v, b: b} }

// next decodes the next field into w.f, skipping fields with oversized
// ids. It returns false at the end of the message, at its first malformed
// field (decoding stops there, as protozero's does) and when the step
// budget ran out (w.st says so). It holds the whole decoder, so that a
// walk costs one call per field.
func (w *fieldWalk) next() bool {
	b, pos := w.b, w.pos
	for {
		if pos >= len(b) {
			return false
		}
		var preamble uint64
		p := pos
		if b[p] < 0x80 {
			preamble = uint64(b[p])
			p++
		} else {
			var vok bool
			preamble, p, vok = parseVarint(b, p)
			if !vok {
				return false
			}
		}
		id := uint32(preamble >> 3)
		if id == 0 || p >= len(b) {
			return false
		}
		f := field{id: id, wire: uint8(preamble & 7)}
		switch f.wire {
		case wireVarint:
			v, np, vok := parseVarint(b, p)
			if !vok {
				return false
			}
			f.val, p = v, np
		case wireLen:
			n, np, vok := parseVarint(b, p)
			if !vok || n > uint64(len(b)-np) {
				return false
			}
			f.data = b[np : np+int(n) : np+int(n)]
			p = np + int(n)
		case wireFixed64:
			if len(b)-p < 8 {
				return false
			}
			f.val = uint64(b[p]) | uint64(b[p+1])<<8 | uint64(b[p+2])<<16 | uint64(b[p+3])<<24 |
				uint64(b[p+4])<<32 | uint64(b[p+5])<<40 | uint64(b[p+6])<<48 | uint64(b[p+7])<<56
			p += 8
		case wireFixed32:
			if len(b)-p < 4 {
				return false
			}
			f.val = uint64(b[p]) | uint64(b[p+1])<<8 | uint64(b[p+2])<<16 | uint64(b[p+3])<<24
			p += 4
		default:
			return false
		}
		if id > maxDecodedFieldID {
			pos = p
			continue
		}
		w.pos = p
		if w.v != nil && !w.v.step() {
			w.st = w.v.budgetAbort()
			return false
		}
		w.f = f
		return true
	}
}

// appendVarint appends v as a minimal varint. It stays here rather than
// using protowire.AppendVarint: this small loop inlines into the state
// serializer, where protowire's call costs ~14% on ApplyPatch and
// Serialize (measured on a loaded 2-core VM, min of 6 runs).
func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// varintLen is the size of v as a minimal varint.
func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendTag appends a field tag. Like protozero, the tag is computed in 32
// bits, so ids of 2^29 and above wrap.
func appendTag(b []byte, id uint32, wire uint8) []byte {
	return appendVarint(b, uint64(id<<3|uint32(wire)))
}
