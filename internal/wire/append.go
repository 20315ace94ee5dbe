package wire

import "google.golang.org/protobuf/encoding/protowire"

// AppendVarint appends field num as a varint.
func AppendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// AppendInt32 appends an int32 field the protobuf way: a negative value
// sign-extends to 10 bytes.
func AppendInt32(b []byte, num protowire.Number, v int32) []byte {
	return AppendVarint(b, num, uint64(int64(v)))
}

// AppendBool appends a bool field (1 or 0).
func AppendBool(b []byte, num protowire.Number, v bool) []byte {
	return AppendVarint(b, num, protowire.EncodeBool(v))
}

// AppendBytes appends a length-delimited field.
func AppendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// AppendString appends a string field.
func AppendString(b []byte, num protowire.Number, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// AppendNested appends field num as a length-delimited message whose
// content fn appends. The length is inserted once the content is known
// (one memmove), so nothing is encoded twice.
func AppendNested(b []byte, num protowire.Number, fn func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	start := len(b)
	b = fn(b)
	n := len(b) - start
	k := protowire.SizeVarint(uint64(n))
	b = append(b, make([]byte, k)...)
	copy(b[start+k:], b[start:start+n])
	protowire.AppendVarint(b[start:start], uint64(n))
	return b
}

// AppendLen appends the tag and length prefix of length-delimited field
// num whose n bytes of content the caller appends next (a message whose
// size it computed beforehand, encoded in place without a copy).
func AppendLen(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}
