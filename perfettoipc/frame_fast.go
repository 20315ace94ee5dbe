package perfettoipc

import (
	"encoding/binary"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
)

// The hot path of the wire without allocations: an InvokeMethod frame
// (a producer's CommitData, above all) is read in place from the
// deserializer's buffer, and replies (ReadBuffers slices, empty
// acknowledgements) are encoded straight into the connection's write
// buffer. Everything else goes through the generated messages.

// Frame field numbers (Perfetto's IPCFrame).
const (
	frameRequestID         = 2
	frameInvokeMethod      = 5
	frameInvokeMethodReply = 6

	invokeServiceID = 1
	invokeMethodID  = 2
	invokeArgs      = 3
	invokeDropReply = 4

	replySuccess = 1
	replyHasMore = 2
	replyProto   = 3
)

// invokeView is an InvokeMethod frame read in place: Args aliases the
// payload, valid until the deserializer's next call.
type invokeView struct {
	requestID          uint64
	serviceID, method  uint32
	args               []byte
	dropReply, hasArgs bool
}

// parseInvoke reads payload as an InvokeMethod frame. ok is false for
// any other frame, or one this strict reader does not take (a repeated
// field, an unknown one, a malformed one): the caller then decodes it
// with the generated code, which has the last word.
func parseInvoke(payload []byte, v *invokeView) (ok bool) {
	*v = invokeView{}
	var inv []byte
	it := wire.Fields(payload)
	for it.Next() {
		f := it.Field()
		switch {
		case f.Num == frameRequestID && f.Type == protowire.VarintType:
			v.requestID = f.Varint
		case f.Num == frameInvokeMethod && f.Type == protowire.BytesType && inv == nil:
			inv = f.Bytes
		default:
			return false
		}
	}
	if it.Err() != nil || inv == nil {
		return false
	}
	it = wire.Fields(inv)
	for it.Next() {
		f := it.Field()
		switch {
		case f.Num == invokeServiceID && f.Type == protowire.VarintType:
			v.serviceID = uint32(f.Varint)
		case f.Num == invokeMethodID && f.Type == protowire.VarintType:
			v.method = uint32(f.Varint)
		case f.Num == invokeArgs && f.Type == protowire.BytesType && !v.hasArgs:
			v.args, v.hasArgs = f.Bytes, true
		case f.Num == invokeDropReply && f.Type == protowire.VarintType:
			v.dropReply = f.Varint != 0
		default:
			return false
		}
	}
	return it.Err() == nil
}

// nextPayload returns the next complete frame's payload, in place (valid
// until the next Feed or nextPayload), or nil when no frame is complete.
// Empty frames are skipped.
func (d *Deserializer) nextPayload() ([]byte, error) {
	d.compact()
	for {
		b := d.buf[d.off:]
		if len(b) < headerSize {
			return nil, nil
		}
		n := binary.LittleEndian.Uint32(b)
		if uint64(n) > MaxFrameSize-headerSize {
			return nil, fmt.Errorf("%w: header announces %d payload bytes (max %d)", ErrFrameTooLarge, n, MaxFrameSize-headerSize)
		}
		end := headerSize + int(n)
		if len(b) < end {
			return nil, nil
		}
		d.pending = end
		if n > 0 {
			return b[headerSize:end], nil
		}
		d.compact()
	}
}

// compact drops the frame nextPayload returned last; the buffer is
// shifted down only when the rest is small or the front is large, so a
// read of many frames costs one shift.
func (d *Deserializer) compact() {
	d.off += d.pending
	d.pending = 0
	if d.off == len(d.buf) {
		d.buf, d.off = d.buf[:0], 0
	} else if d.off > len(d.buf)/2 {
		n := copy(d.buf, d.buf[d.off:])
		d.buf, d.off = d.buf[:n], 0
	}
}

// appendReplyFrame appends an InvokeMethodReply frame (length prefix
// included) with reply as reply_proto, encoded as traced encodes it:
// success only when true, has_more and reply_proto always.
func appendReplyFrame(dst []byte, requestID uint64, success, hasMore bool, reply []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst = wire.AppendVarint(dst, frameRequestID, requestID)
	inner := 2 // has_more
	if success {
		inner += 2
		inner += 1 + protowire.SizeBytes(len(reply))
	}
	dst = wire.AppendLen(dst, frameInvokeMethodReply, inner)
	if success {
		dst = wire.AppendBool(dst, replySuccess, true)
	}
	dst = wire.AppendBool(dst, replyHasMore, hasMore)
	if success {
		dst = wire.AppendBytes(dst, replyProto, reply)
	}
	n := len(dst) - start
	if n > MaxFrameSize {
		return dst[:start], fmt.Errorf("%w: %d bytes to send (max %d)", ErrFrameTooLarge, n, MaxFrameSize)
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(n-headerSize))
	return dst, nil
}

// ReadBuffersResponse field numbers.
const (
	readBuffersSlices = 2
	sliceData         = 1
	sliceLast         = 2
)

// appendSlice appends one ReadBuffersResponse.slices entry.
func appendSlice(dst, data []byte, last bool) []byte {
	dst = wire.AppendLen(dst, readBuffersSlices, 1+protowire.SizeBytes(len(data))+2)
	dst = wire.AppendBytes(dst, sliceData, data)
	return wire.AppendBool(dst, sliceLast, last)
}
