package perfettoipc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// MaxFrameSize bounds one frame, header included (Perfetto's
// kIPCBufferSize). A peer announcing a larger frame is disconnected.
const MaxFrameSize = 128 << 10

// headerSize is the length prefix of every frame.
const headerSize = 4

// ErrFrameTooLarge is returned by the deserializer for a header announcing
// a frame above MaxFrameSize; the connection cannot continue.
var ErrFrameTooLarge = errors.New("perfettoipc: IPC frame too large")

// Deserializer splits a byte stream into frames. Bytes arrive in any
// pieces (partial frames, several frames); it never holds more than one
// frame's worth of bytes. Payloads that do not parse as a Frame are
// dropped, as Perfetto does, and counted.
type Deserializer struct {
	buf     []byte
	off     int    // start of the bytes not yet returned
	pending int    // length of the frame nextPayload returned last
	Dropped uint64 // payloads that were not a valid Frame
}

// Feed appends received bytes. It fails when the buffered bytes announce a
// frame above MaxFrameSize; nothing more can be read from that stream.
// A payload nextPayload returned is invalid from now on.
func (d *Deserializer) Feed(b []byte) error {
	d.compact()
	d.buf = append(d.buf, b...)
	if rest := d.buf[d.off:]; len(rest) >= headerSize {
		if n := binary.LittleEndian.Uint32(rest); uint64(n) > MaxFrameSize-headerSize {
			return fmt.Errorf("%w: header announces %d payload bytes (max %d)", ErrFrameTooLarge, n, MaxFrameSize-headerSize)
		}
	}
	return nil
}

// Next returns the next complete frame, or nil when the buffer holds no
// complete frame. An oversized header is an error (see Feed).
func (d *Deserializer) Next() (*Frame, error) {
	for {
		p, err := d.nextPayload()
		if p == nil || err != nil {
			return nil, err
		}
		f := new(Frame)
		if err := proto.Unmarshal(p, f); err != nil {
			d.Dropped++
			continue
		}
		return f, nil
	}
}

// Buffered is the number of bytes held for an incomplete frame.
func (d *Deserializer) Buffered() int { return len(d.buf) - d.off - d.pending }

// AppendFrame appends f's encoding with its length prefix to dst. It fails
// for a frame above MaxFrameSize, which the peer would refuse.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	dst, err := proto.MarshalOptions{}.MarshalAppend(dst, f)
	if err != nil {
		return dst[:start], fmt.Errorf("perfettoipc: encoding frame: %w", err)
	}
	n := len(dst) - start
	if n > MaxFrameSize {
		return dst[:start], fmt.Errorf("%w: %d bytes to send (max %d)", ErrFrameTooLarge, n, MaxFrameSize)
	}
	binary.LittleEndian.PutUint32(dst[start:], uint32(n-headerSize))
	return dst, nil
}

// SplitFrames splits a complete recorded stream (a golden capture) into
// frame payloads with their offsets. It fails on a truncated stream or an
// oversized header.
func SplitFrames(stream []byte) (payloads [][]byte, offsets []int, err error) {
	for off := 0; off < len(stream); {
		if len(stream)-off < headerSize {
			return nil, nil, fmt.Errorf("perfettoipc: %d trailing bytes at offset %d: not a frame header", len(stream)-off, off)
		}
		n := int(binary.LittleEndian.Uint32(stream[off:]))
		if n > MaxFrameSize-headerSize {
			return nil, nil, fmt.Errorf("%w: at offset %d: %d payload bytes", ErrFrameTooLarge, off, n)
		}
		if off+headerSize+n > len(stream) {
			return nil, nil, fmt.Errorf("perfettoipc: frame at offset %d truncated: %d of %d bytes", off, len(stream)-off-headerSize, n)
		}
		payloads = append(payloads, stream[off+headerSize:off+headerSize+n])
		offsets = append(offsets, off)
		off += headerSize + n
	}
	return payloads, offsets, nil
}
