package relay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// ProtocolVersion is the newest version a hello may carry; a receiver
// refuses versions outside MinProtocolVersion..ProtocolVersion with an
// error frame. Version 2 adds the snapshot tail to the hello (a clone
// snapshot sent as a trace of its own); a sender uses it only for
// snapshots, so an ordinary session still reaches a version-1 receiver.
// Version 3 adds the clock-sync frames (clocksync.go), sent only to a
// receiver whose hello ack says 3 or more; the hello itself is unchanged
// (a sender never needs to announce 3).
const (
	ProtocolVersion    = 3
	MinProtocolVersion = 1
)

// helloVersion is the version a sender announces for id.
func helloVersion(id remote.Identity) uint16 {
	if id.Snapshot.IsZero() {
		return 1
	}
	return 2
}

// Frame types. Part of the wire format: never renumber.
const (
	frameHello    = 1 // sender → receiver: Hello
	frameHelloAck = 2 // receiver → sender: version:u16 lastSeq:u64
	frameBatch    = 3 // sender → receiver: seq:u64 then Trace records
	frameAck      = 4 // receiver → sender: seq:u64, every batch ≤ seq stored
	frameError    = 5 // either way: a UTF-8 message, then the connection ends
	// From version 3 (clocksync.go):
	frameClockSync = 6 // sender → receiver: round, phase, clock snapshot
	frameClockPong = 7 // receiver → sender: round (answers a ping)
	frameLast      = frameClockPong
)

const (
	frameHeaderSize = 5
	helloMagic      = "TPRL"
	maxHostname     = 255
	maxErrorText    = 1024
	// MaxFrame bounds a frame's payload: a full batch and its sequence
	// number.
	MaxFrame = remote.MaxBatchData + 8
)

// ErrProtocol is wrapped by every error about what a peer sent.
var ErrProtocol = errors.New("relay: protocol error")

// Hello is the first frame of a connection.
type Hello struct {
	Version uint16
	ID      remote.Identity
}

// appendFrameHeader appends the header of a frame of n payload bytes.
func appendFrameHeader(dst []byte, typ byte, n int) []byte {
	dst = append(dst, typ)
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// appendHello appends a complete hello frame: magic, version:u16,
// machine:u64, session:16, hostname (u8 length + bytes), and from version
// 2 on the snapshot tail: live session:16, snapshot number:u32, trigger
// (u8 length + UTF-8 bytes).
func appendHello(dst []byte, h Hello) []byte {
	host := h.ID.Hostname
	if len(host) > maxHostname {
		host = host[:maxHostname]
	}
	trig := h.ID.Snapshot.Trigger
	if len(trig) > sinks.MaxSnapshotTrigger {
		trig = trig[:sinks.MaxSnapshotTrigger]
	}
	n := 4 + 2 + 8 + 16 + 1 + len(host)
	if h.Version >= 2 {
		n += 16 + 4 + 1 + len(trig)
	}
	dst = appendFrameHeader(dst, frameHello, n)
	dst = append(dst, helloMagic...)
	dst = binary.BigEndian.AppendUint16(dst, h.Version)
	dst = binary.BigEndian.AppendUint64(dst, h.ID.Machine)
	dst = append(dst, h.ID.Session[:]...)
	dst = append(dst, byte(len(host)))
	dst = append(dst, host...)
	if h.Version >= 2 {
		dst = append(dst, h.ID.Snapshot.Of[:]...)
		dst = binary.BigEndian.AppendUint32(dst, h.ID.Snapshot.N)
		dst = append(dst, byte(len(trig)))
		dst = append(dst, trig...)
	}
	return dst
}

// DecodeHello parses a hello frame's payload.
func DecodeHello(p []byte) (Hello, error) {
	var h Hello
	if len(p) < 4+2+8+16+1 {
		return h, fmt.Errorf("%w: hello of %d bytes is too short", ErrProtocol, len(p))
	}
	if string(p[:4]) != helloMagic {
		return h, fmt.Errorf("%w: hello offset 0: magic %q, want %q", ErrProtocol, p[:4], helloMagic)
	}
	h.Version = binary.BigEndian.Uint16(p[4:])
	h.ID.Machine = binary.BigEndian.Uint64(p[6:])
	copy(h.ID.Session[:], p[14:30])
	n := int(p[30])
	if len(p) < 31+n || h.Version < 2 && len(p) != 31+n {
		return h, fmt.Errorf("%w: hello offset 30: hostname of %d bytes, %d remain", ErrProtocol, n, len(p)-31)
	}
	host := p[31 : 31+n]
	if !utf8.Valid(host) {
		return h, fmt.Errorf("%w: hello offset 31: hostname is not UTF-8", ErrProtocol)
	}
	h.ID.Hostname = string(host)
	if h.ID.Machine == 0 {
		return h, fmt.Errorf("%w: hello offset 6: machine id 0", ErrProtocol)
	}
	if h.Version < 2 {
		return h, nil
	}
	off := 31 + n
	tail := p[off:]
	if len(tail) < 16+4+1 {
		return h, fmt.Errorf("%w: hello offset %d: snapshot tail of %d bytes is too short", ErrProtocol, off, len(tail))
	}
	copy(h.ID.Snapshot.Of[:], tail)
	h.ID.Snapshot.N = binary.BigEndian.Uint32(tail[16:])
	if h.ID.Snapshot.N == 0 {
		return h, fmt.Errorf("%w: hello offset %d: snapshot number 0", ErrProtocol, off+16)
	}
	m := int(tail[20])
	if len(tail) != 21+m {
		return h, fmt.Errorf("%w: hello offset %d: trigger of %d bytes, %d remain", ErrProtocol, off+20, m, len(tail)-21)
	}
	if !utf8.Valid(tail[21:]) {
		return h, fmt.Errorf("%w: hello offset %d: trigger is not UTF-8", ErrProtocol, off+21)
	}
	h.ID.Snapshot.Trigger = string(tail[21:])
	return h, nil
}

func appendSeqFrame(dst []byte, typ byte, seq uint64) []byte {
	dst = appendFrameHeader(dst, typ, 8)
	return binary.BigEndian.AppendUint64(dst, seq)
}

func appendHelloAck(dst []byte, last uint64) []byte {
	dst = appendFrameHeader(dst, frameHelloAck, 10)
	dst = binary.BigEndian.AppendUint16(dst, ProtocolVersion)
	return binary.BigEndian.AppendUint64(dst, last)
}

func appendErrorFrame(dst []byte, msg string) []byte {
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText]
	}
	dst = appendFrameHeader(dst, frameError, len(msg))
	return append(dst, msg...)
}

// decodeSeq parses a payload that is one sequence number.
func decodeSeq(what string, p []byte) (uint64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("%w: %s of %d bytes, want 8", ErrProtocol, what, len(p))
	}
	return binary.BigEndian.Uint64(p), nil
}

// DecodeBatch splits a batch frame's payload into its sequence number and
// records, and checks the records' framing.
func DecodeBatch(p []byte) (seq uint64, records []byte, packets int, nbytes uint64, err error) {
	if len(p) < 8 {
		return 0, nil, 0, 0, fmt.Errorf("%w: batch of %d bytes has no sequence number", ErrProtocol, len(p))
	}
	seq = binary.BigEndian.Uint64(p)
	if seq == 0 {
		return 0, nil, 0, 0, fmt.Errorf("%w: batch offset 0: sequence number 0", ErrProtocol)
	}
	records = p[8:]
	packets, nbytes, err = remote.CheckRecords(records)
	if err != nil {
		return 0, nil, 0, 0, fmt.Errorf("%w: batch %d: payload %w", ErrProtocol, seq, err)
	}
	return seq, records, packets, nbytes, nil
}

// frameReader reads frames into one reused buffer that grows, as bytes
// arrive, to at most MaxFrame bytes.
type frameReader struct {
	r   *bufio.Reader
	hdr [frameHeaderSize]byte
	buf []byte
	off int64 // stream offset of the next frame, for errors
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next frame; the payload is valid until the next call.
func (fr *frameReader) next() (byte, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return 0, nil, err
	}
	typ := fr.hdr[0]
	n := binary.BigEndian.Uint32(fr.hdr[1:])
	if typ < frameHello || typ > frameLast {
		return 0, nil, fmt.Errorf("%w: stream offset %d: unknown frame type %d", ErrProtocol, fr.off, typ)
	}
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: stream offset %d: frame of %d bytes exceeds the limit %d", ErrProtocol, fr.off, n, MaxFrame)
	}
	// The buffer grows with the bytes that actually arrive, not with the
	// length the peer claims: a header announcing 16 MiB costs nothing
	// until the bytes come.
	p := fr.buf[:0]
	for len(p) < int(n) {
		if len(p) == cap(p) {
			np := make([]byte, len(p), min(int(n), max(2*cap(p), 64<<10)))
			copy(np, p)
			p = np
		}
		m, err := fr.r.Read(p[len(p):min(int(n), cap(p))])
		p = p[:len(p)+m]
		if err != nil && len(p) < int(n) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			fr.buf = p[:0]
			return 0, nil, fmt.Errorf("relay: stream offset %d: frame of %d bytes: %w", fr.off, n, err)
		}
	}
	fr.buf = p[:0]
	fr.off += frameHeaderSize + int64(n)
	return typ, p, nil
}

// errorText makes an error frame's payload printable.
func errorText(p []byte) string {
	if len(p) > maxErrorText {
		p = p[:maxErrorText]
	}
	if !utf8.Valid(p) {
		return fmt.Sprintf("%q", p)
	}
	return string(p)
}
