package pipeline

import (
	"github.com/tracepipe/tracepipe/internal/wire"
	"google.golang.org/protobuf/encoding/protowire"
)

// Short names for the tests' hand-built packets.
func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	return wire.AppendVarint(b, num, v)
}
func appendString(b []byte, num protowire.Number, s string) []byte {
	return wire.AppendString(b, num, s)
}
func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	return wire.AppendBytes(b, num, m)
}

// walkTopLevel calls fn with each well-formed top-level field of msg
// (tag included), stopping at the first malformed one (package restore
// has its own, for the restore packets it builds).
func walkTopLevel(msg []byte, fn func(num protowire.Number, field []byte)) {
	for it := wire.Fields(msg); it.Next(); {
		f := it.Field()
		fn(f.Num, f.Raw(msg))
	}
}
