package remote

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrBadBatch is wrapped by every error about a batch's contents.
var ErrBadBatch = errors.New("remote: malformed batch")

// CheckRecords validates that data is a sequence of Trace.packet records
// (0x0a, varint length, that many bytes) and returns how many packets and
// packet bytes (framing excluded) there are. Errors name the byte offset.
// It never allocates.
func CheckRecords(data []byte) (packets int, bytes uint64, err error) {
	err = WalkRecords(data, func(p []byte) error {
		packets++
		bytes += uint64(len(p))
		return nil
	})
	return packets, bytes, err
}

// WalkRecords calls fn with each packet of data (Trace framing), in order,
// stopping at the first malformed record or error from fn.
func WalkRecords(data []byte, fn func(packet []byte) error) error {
	for off := 0; off < len(data); {
		if data[off] != 0x0a {
			return fmt.Errorf("%w: offset %d: tag 0x%02x, want 0x0a (Trace.packet)", ErrBadBatch, off, data[off])
		}
		l, n := protowire.ConsumeVarint(data[off+1:])
		if n < 0 {
			return fmt.Errorf("%w: offset %d: packet length: %v", ErrBadBatch, off, protowire.ParseError(n))
		}
		start := off + 1 + n
		if l > uint64(len(data)-start) {
			return fmt.Errorf("%w: offset %d: packet of %d bytes overruns the batch (%d left)", ErrBadBatch, off, l, len(data)-start)
		}
		end := start + int(l)
		if err := fn(data[start:end]); err != nil {
			return err
		}
		off = end
	}
	return nil
}
