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
	Err  error          // a protowire parse error
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
	b   []byte
	off int
	f   Field
	err *Error
}

// Fields returns an iterator over the fields of message b.
func Fields(b []byte) Iter { return Iter{b: b} }

// Next reads the next field; it returns false at the end of the message
// or at a malformed field (see Err).
func (it *Iter) Next() bool {
	if it.err != nil || it.off >= len(it.b) {
		return false
	}
	b, off := it.b, it.off
	num, typ, n := protowire.ConsumeTag(b[off:])
	if n < 0 {
		it.err = &Error{Off: off, Err: protowire.ParseError(n)}
		return false
	}
	f := Field{Num: num, Type: typ, Off: off, ValOff: off + n}
	v := b[f.ValOff:]
	switch typ {
	case protowire.VarintType:
		f.Varint, n = protowire.ConsumeVarint(v)
	case protowire.Fixed32Type:
		var x uint32
		x, n = protowire.ConsumeFixed32(v)
		f.Varint = uint64(x)
	case protowire.Fixed64Type:
		f.Varint, n = protowire.ConsumeFixed64(v)
	case protowire.BytesType:
		f.Bytes, n = protowire.ConsumeBytes(v)
	default:
		n = protowire.ConsumeFieldValue(num, typ, v)
	}
	if n < 0 {
		it.err = &Error{Off: off, Num: num, Type: typ, Err: protowire.ParseError(n)}
		return false
	}
	f.End = f.ValOff + n
	if typ == protowire.BytesType {
		f.ValOff = f.End - len(f.Bytes)
	}
	it.f = f
	it.off = f.End
	return true
}

// Field returns the field Next read.
func (it *Iter) Field() Field { return it.f }

// Err returns the malformed field that stopped the walk, or nil.
func (it *Iter) Err() error {
	if it.err == nil {
		return nil
	}
	return it.err
}

// Malformed returns the malformed field that stopped the walk, or nil;
// unlike errors.As on Err it never allocates.
func (it *Iter) Malformed() *Error { return it.err }

// Walk calls fn for every field of message b, in order, and stops at the
// first error, its own (returned as is) or fn's. Use [Iter] on hot paths:
// a closure that captures may allocate.
func Walk(b []byte, fn func(f Field) error) error {
	it := Fields(b)
	for it.Next() {
		if err := fn(it.Field()); err != nil {
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
			out, found = f, true
		}
	}
	if it.err != nil {
		return Field{}, false
	}
	return out, found
}
