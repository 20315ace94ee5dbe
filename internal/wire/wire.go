// Package wire is tracepipe's one protobuf wire toolkit, built on
// protowire: a field iterator that walks one message without allocating,
// and the append helpers every encoder in the tree uses (varint, int32,
// bool, bytes, string and nested-message fields).
//
// It owns the wire format only: no field numbers, no message semantics
// (those live in tracefile, smb, protovm and the packages that own each
// message). It must not allocate on any success path, so that smb's
// TraceWriter, the buffer read path and the sinks can use it in steady
// state.
package wire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field is one field of a message, as [Iter] returns it.
type Field struct {
	Num  protowire.Number
	Type protowire.Type
	// Varint is the value of a varint, fixed32 or fixed64 field.
	Varint uint64
	// Bytes is the payload of a length-delimited field (aliasing the
	// walked message); nil for the other types.
	Bytes []byte
	// Off is the offset of the field's tag in the walked message, ValOff
	// the offset of its value (of the payload, for length-delimited).
	Off, ValOff int
	// End is the offset just after the field.
	End int
}

// Raw returns the whole field (tag and value) from the walked message b.
func (f Field) Raw(b []byte) []byte { return b[f.Off:f.End] }

// Error is a malformed field: Off is the offset of its tag in the walked
// message; Num is 0 when the tag itself could not be read.
type Error struct {
	Off  int
	Num  protowire.Number
	Type protowire.Type // the field's wire type when Num is not 0
	// ValOff is the offset of the field's value (just after its tag) when
	// Num is not 0: where a truncated or overlong value starts.
	ValOff int
	Err    error // a protowire parse error
}

func (e *Error) Error() string {
	if e.Num == 0 {
		return fmt.Sprintf("offset %d: tag: %v", e.Off, e.Err)
	}
	return fmt.Sprintf("offset %d: field %d: %v", e.Off, e.Num, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Iter walks the fields of one message in order:
//
//	for it := wire.Fields(b); it.Next(); {
//		f := it.Field()
//		...
//	}
//	if err := it.Err(); err != nil { ... }
//
// It stops at the first malformed field; Err then describes it.
type Iter struct {
	b      []byte
	off    int
	f      Field
	failed bool
	err    Error // valid when failed; held by value so a malformed message costs no allocation
}

// Fields returns an iterator over the fields of message b.
func Fields(b []byte) Iter { return Iter{b: b} }

// Next reads the next field; it returns false at the end of the message
// or at a malformed field (see Err). One-byte tags, one-byte varints and
// short length prefixes, the common case in trace packets, are decoded
// inline; everything else goes through protowire.
func (it *Iter) Next() bool {
	b, off := it.b, it.off
	if off >= len(b) { // a failed walk sets off to len(b)
		return false
	}
	var num protowire.Number
	var typ protowire.Type
	n := 1
	if c := b[off]; c < 0x80 && c >= 8 {
		num, typ = protowire.Number(c>>3), protowire.Type(c&7)
	} else if num, typ, n = protowire.ConsumeTag(b[off:]); n < 0 {
		it.fail(Error{Off: off, Err: protowire.ParseError(n)})
		return false
	}
	f := &it.f
	f.Num, f.Type, f.Off, f.ValOff = num, typ, off, off+n
	f.Varint, f.Bytes = 0, nil
	val := f.ValOff
	switch typ {
	case protowire.VarintType:
		if val < len(b) && b[val] < 0x80 {
			f.Varint, n = uint64(b[val]), 1
		} else {
			f.Varint, n = protowire.ConsumeVarint(b[val:])
		}
	case protowire.BytesType:
		if val < len(b) && b[val] < 0x80 && int(b[val]) < len(b)-val {
			l := int(b[val])
			f.Bytes, n = b[val+1:val+1+l], 1+l
		} else {
			f.Bytes, n = protowire.ConsumeBytes(b[val:])
		}
	case protowire.Fixed32Type:
		var x uint32
		x, n = protowire.ConsumeFixed32(b[val:])
		f.Varint = uint64(x)
	case protowire.Fixed64Type:
		f.Varint, n = protowire.ConsumeFixed64(b[val:])
	default:
		n = protowire.ConsumeFieldValue(num, typ, b[val:])
	}
	if n < 0 {
		it.fail(Error{Off: off, Num: num, Type: typ, ValOff: val, Err: protowire.ParseError(n)})
		return false
	}
	f.End = val + n
	if typ == protowire.BytesType {
		f.ValOff = f.End - len(f.Bytes)
	}
	it.off = f.End
	return true
}

func (it *Iter) fail(e Error) {
	it.failed, it.err, it.off = true, e, len(it.b)
}

// Field returns the field Next read. It points into the iterator and is
// valid until the next call to Next; copy *f to keep it.
func (it *Iter) Field() *Field { return &it.f }

// Err returns the malformed field that stopped the walk, or nil.
func (it *Iter) Err() error {
	if !it.failed {
		return nil
	}
	e := it.err
	return &e
}

// Malformed returns the malformed field that stopped the walk, or nil.
// Unlike Err it never allocates: hot paths that drop malformed input
// check it.
func (it *Iter) Malformed() *Error {
	if !it.failed {
		return nil
	}
	return &it.err
}

// Walk calls fn for every field of message b, in order, and stops at the
// first error, its own (returned as is) or fn's. Use [Iter] on hot paths:
// a closure that captures may allocate.
func Walk(b []byte, fn func(f Field) error) error {
	it := Fields(b)
	for it.Next() {
		if err := fn(*it.Field()); err != nil {
			return err
		}
	}
	return it.Err()
}

// Last returns the last field num of message b with wire type typ (as
// protobuf, the last occurrence wins); false when there is none or b is
// malformed.
func Last(b []byte, num protowire.Number, typ protowire.Type) (Field, bool) {
	var out Field
	found := false
	it := Fields(b)
	for it.Next() {
		if f := it.Field(); f.Num == num && f.Type == typ {
			out, found = *f, true
		}
	}
	if it.failed {
		return Field{}, false
	}
	return out, found
}
