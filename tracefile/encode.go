package tracefile

import "google.golang.org/protobuf/encoding/protowire"

// appendNested appends field num as a length-delimited message whose
// content fn appends. The length is inserted after the content is known
// (one memmove), so nothing is encoded twice.
func appendNested(b []byte, num protowire.Number, fn func([]byte) []byte) []byte {
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

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendInt32Field encodes an int32 the protobuf way: negative values
// sign-extend to 10 bytes.
func appendInt32Field(b []byte, num protowire.Number, v int32) []byte {
	return appendVarintField(b, num, uint64(int64(v)))
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	return appendVarintField(b, num, protowire.EncodeBool(v))
}
