package perfettosvc

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
)

// The small helpers of this package's tests alone; those its tests share
// with other packages' tests are in internal/testsupport, cfgtest and
// tracetest.

// fieldCloneSnapshotTrigger is TracePacket.clone_snapshot_trigger.
const fieldCloneSnapshotTrigger = 113

// walkProto calls fn for each field of b: its number, its varint or
// fixed value, its payload if length-delimited.
func walkProto(b []byte, fn func(num protowire.Number, v uint64, payload []byte) error) error {
	return wire.Walk(b, func(f wire.Field) error { return fn(f.Num, f.Varint, f.Bytes) })
}

// stringField is the last field num of b as a string ("" if none).
func stringField(b []byte, num protowire.Number) string {
	return string(lastField(b, num).Bytes)
}
