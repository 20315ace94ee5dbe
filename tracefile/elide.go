package tracefile

import (
	"fmt"
	"io"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Streaming oversized records.
//
// A reader that needs a packet's header fields (sequence id, timestamp,
// loss flags, kind) but not a huge payload should not hold that payload:
// with ReaderOptions.MaxPacketBuffer set, a record longer than the buffer is
// read field by field. Its top-level fields are kept while they fit in the
// buffer; a length-delimited field that does not fit is discarded as it
// streams past (never buffered) and stands in the returned packet as the
// same field with an empty payload, so DecodePacket still names the
// packet's kind. Record.Elided and the Reader's counters say what was not
// kept: consumers report it, never treat the stub as the real payload.

// elidedStub is appended when a record's contents stop parsing while
// streamed: a tag of field 0, which no protobuf decoder accepts, so the
// packet is counted as malformed exactly as when it is read whole.
const elidedStub = 0x00

// readElided streams a record of n bytes (n > the packet buffer), keeping
// what fits. The framing error cases (EOF, a corrupt stream) are errors as
// in readPayload; a packet whose own fields do not parse is returned with
// an invalid stub so that the consumer counts it as malformed.
func (r *Reader) readElided(start int64, n int) (Record, error) {
	budget := r.keep
	b := r.buf[:0]
	left := int64(n)
	var elided int64
	fields := 0
	bad := false
	var badFrom int64 // bytes of the record from the start of the field that did not parse
	for left > 0 && !bad {
		badFrom = left
		tag, used, ok, err := r.recordVarint(start, left)
		left -= int64(used)
		if err != nil {
			return Record{}, err
		}
		num, typ := protowire.DecodeTag(tag)
		if !ok || num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
			bad = true
			break
		}
		switch typ {
		case protowire.VarintType:
			v, used, ok, err := r.recordVarint(start, left)
			left -= int64(used)
			if err != nil {
				return Record{}, err
			}
			if !ok {
				bad = true
				break
			}
			if len(b)+2*maxVarintLen <= budget {
				b = protowire.AppendTag(b, num, typ)
				b = protowire.AppendVarint(b, v)
			} else {
				elided += int64(protowire.SizeTag(num) + used)
				fields++
			}
		case protowire.Fixed32Type, protowire.Fixed64Type, protowire.BytesType:
			var l int64 = 4
			hdr := protowire.SizeTag(num)
			if typ == protowire.Fixed64Type {
				l = 8
			}
			if typ == protowire.BytesType {
				v, used, ok, err := r.recordVarint(start, left)
				left -= int64(used)
				if err != nil {
					return Record{}, err
				}
				if !ok || v > uint64(left) {
					bad = true
					break
				}
				l = int64(v)
				hdr += used
			}
			if l > left {
				bad = true
				break
			}
			if len(b)+hdr+int(l) <= budget {
				b = protowire.AppendTag(b, num, typ)
				if typ == protowire.BytesType {
					b = protowire.AppendVarint(b, uint64(l))
				}
				if err := r.readInto(start, &b, int(l)); err != nil {
					return Record{}, err
				}
			} else {
				if err := r.discard(start, l); err != nil {
					return Record{}, err
				}
				elided += int64(hdr) + l
				fields++
				if typ == protowire.BytesType && len(b)+protowire.SizeTag(num)+1 <= budget {
					b = protowire.AppendTag(b, num, typ)
					b = append(b, 0) // empty payload: the kind survives
				}
			}
			left -= l
		default:
			bad = true
		}
	}
	if bad {
		if err := r.discard(start, left); err != nil {
			return Record{}, err
		}
		elided += badFrom
		fields++
		b = append(b, elidedStub)
	}
	r.buf = b
	r.elidedRecords++
	r.elidedBytes += elided
	return Record{Offset: start, Packet: b, Size: n, Elided: elided, ElidedFields: fields}, nil
}

// recordVarint reads a varint of at most left bytes of the record; used
// counts the bytes consumed. ok is false when those bytes hold no valid
// varint (the packet is malformed, the framing is not).
func (r *Reader) recordVarint(start int64, left int64) (v uint64, used int, ok bool, err error) {
	for i := 0; i < maxVarintLen && int64(i) < left; i++ {
		c, err := r.br.ReadByte()
		if err != nil {
			if err == io.EOF {
				return 0, i, false, fmt.Errorf("record at offset %d: input ends inside the packet: %w", start, ErrTruncated)
			}
			return 0, i, false, r.wrapStreamErr(start, "packet", err)
		}
		r.consumed(1)
		if i == maxVarintLen-1 && c > 1 {
			return 0, i + 1, false, nil
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1, true, nil
		}
	}
	return 0, int(min(left, maxVarintLen)), false, nil
}

// readInto appends n bytes of the stream to *b.
func (r *Reader) readInto(start int64, b *[]byte, n int) error {
	old := len(*b)
	*b = slices.Grow(*b, n)[:old+n]
	m, err := io.ReadFull(r.br, (*b)[old:])
	r.consumed(m)
	if err != nil {
		*b = (*b)[:old+m]
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return fmt.Errorf("record at offset %d: input ends inside the packet: %w", start, ErrTruncated)
		}
		return r.wrapStreamErr(start, "packet", err)
	}
	return nil
}

// discard skips n bytes of the stream without buffering them.
func (r *Reader) discard(start int64, n int64) error {
	for n > 0 {
		d, err := r.br.Discard(int(min(n, 1<<30)))
		r.consumed(d)
		n -= int64(d)
		if err != nil {
			if err == io.EOF {
				return fmt.Errorf("record at offset %d: input ends inside the packet: %w", start, ErrTruncated)
			}
			return r.wrapStreamErr(start, "packet", err)
		}
	}
	return nil
}
