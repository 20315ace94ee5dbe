package tracefile

import (
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// recordTag is the Trace.packet tag byte: field 1, wire type 2 (bytes).
const recordTag = 0x0a

// MaxRecordHeaderSize is the largest header [AppendRecordHeader] writes:
// the tag byte plus a 10-byte varint.
const MaxRecordHeaderSize = 1 + maxVarintLen

// maxVarintLen is the longest varint encoding of a uint64.
const maxVarintLen = 10

// AppendRecordHeader appends the Trace framing header for a packet of n
// bytes: 0x0a followed by varint(n).
func AppendRecordHeader(dst []byte, n int) []byte {
	dst = append(dst, recordTag)
	return protowire.AppendVarint(dst, uint64(n))
}

// AppendRecord appends one Trace record (header and packet bytes) to dst.
func AppendRecord(dst, packet []byte) []byte {
	dst = AppendRecordHeader(dst, len(packet))
	return append(dst, packet...)
}

// RecordSize is the number of bytes a packet of n bytes takes in a trace
// file, header included.
func RecordSize(n int) int {
	return 1 + protowire.SizeVarint(uint64(n)) + n
}

// Writer writes Trace records to an io.Writer. It buffers nothing: each
// WritePacket issues one Write for the header and one for the packet, so a
// Writer over a buffered writer costs no allocation per packet.
type Writer struct {
	w   io.Writer
	hdr [MaxRecordHeaderSize]byte
	n   int64
}

// NewWriter returns a Writer appending records to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WritePacket writes one record holding packet.
func (w *Writer) WritePacket(packet []byte) error {
	h := AppendRecordHeader(w.hdr[:0], len(packet))
	n, err := w.w.Write(h)
	w.n += int64(n)
	if err != nil {
		return err
	}
	n, err = w.w.Write(packet)
	w.n += int64(n)
	return err
}

// Written reports the bytes written so far, headers included.
func (w *Writer) Written() int64 { return w.n }
