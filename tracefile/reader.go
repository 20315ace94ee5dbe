package tracefile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"
)

// Errors the [Reader] wraps; match them with errors.Is. Every error a
// Reader returns also names the byte offset of the record it was reading.
var (
	// ErrTruncated: the input ends inside a record (or inside a compressed
	// stream). Everything before that record was complete; this is what a
	// file cut by kill -9 looks like.
	ErrTruncated = errors.New("tracefile: truncated record")
	// ErrRecordTooLarge: a record's length exceeds the reader's
	// MaxRecordSize. Nothing was allocated for it.
	ErrRecordTooLarge = errors.New("tracefile: record too large")
	// ErrMalformed: the bytes are not a Trace message (bad varint, field 0,
	// field 1 with a non-bytes wire type, groups, a corrupt compressed
	// stream).
	ErrMalformed = errors.New("tracefile: malformed trace")
)

// DefaultMaxRecordSize is the largest record a Reader accepts unless told
// otherwise (256 MiB).
const DefaultMaxRecordSize = 256 << 20

// DefaultMaxZstdWindow bounds the history window a zstd-compressed file may
// ask the decoder for (64 MiB); the decoder allocates it up front.
const DefaultMaxZstdWindow = 64 << 20

// Compression names how a trace file is compressed as a whole.
type Compression int

// Compressions recognised by their magic bytes.
const (
	CompressionNone Compression = iota
	CompressionGzip
	CompressionZstd
)

// String returns "none", "gzip" or "zstd".
func (c Compression) String() string {
	switch c {
	case CompressionGzip:
		return "gzip"
	case CompressionZstd:
		return "zstd"
	}
	return "none"
}

var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// ReaderOptions tunes a Reader; the zero value means the defaults.
type ReaderOptions struct {
	// MaxRecordSize is the largest packet accepted (0 → DefaultMaxRecordSize).
	MaxRecordSize int
	// MaxZstdWindow bounds a zstd stream's window (0 → DefaultMaxZstdWindow).
	MaxZstdWindow uint64
	// MaxPacketBuffer, when > 0, is the most a Reader holds of one record:
	// a longer record is streamed field by field, its top-level fields kept
	// while they fit and the others discarded unread (see Record.Elided).
	// 0 → every record is read whole (up to MaxRecordSize).
	MaxPacketBuffer int
}

// Record is one packet read from a trace.
type Record struct {
	// Offset is the byte offset of the record's 0x0a tag in the
	// (decompressed) Trace stream; for an uncompressed file, the file offset.
	Offset int64
	// Packet is the TracePacket encoding. It is only valid until the next
	// call to Next.
	Packet []byte
	// Size is the record's length as written: len(Packet) unless fields
	// were elided.
	Size int
	// Elided counts the bytes of the record that were discarded unread
	// because it was longer than ReaderOptions.MaxPacketBuffer (0: Packet
	// is the whole record). An elided length-delimited field stays in
	// Packet with an empty payload, so the packet's kind is still known;
	// a record whose fields stop parsing ends in an invalid field-0 tag, so
	// decoders report it as malformed. ElidedFields counts the elided
	// fields.
	Elided       int64
	ElidedFields int
}

// Reader streams the packets of a Trace (a concatenation of
// `0x0a varint(len) packet` records), one at a time. Top-level fields other
// than 1 are skipped. gzip and zstd files are decompressed transparently.
//
// A Reader never allocates more than the bytes that actually arrived (plus
// a doubling margin) for a record, and never more than MaxRecordSize: a
// length is checked against the guard and, where the input size is known,
// against the bytes left, before anything is allocated for it.
type Reader struct {
	br          *bufio.Reader
	off         int64 // offset of the next unread byte of the Trace stream
	remaining   int64 // bytes left in the input, -1 if unknown
	max         int
	buf         []byte
	compression Compression
	zdec        *zstd.Decoder
	err         error // sticky
	skipped     int
	keep        int // ReaderOptions.MaxPacketBuffer
	// records streamed because they exceeded keep, and the bytes of them
	// discarded unread
	elidedRecords int
	elidedBytes   int64
}

// NewReader returns a Reader over r with default options.
func NewReader(r io.Reader) (*Reader, error) { return NewReaderOptions(r, ReaderOptions{}) }

// NewReaderOptions returns a Reader over r. It detects gzip and zstd by
// their magic bytes; it fails only when a compressed stream's header is bad.
func NewReaderOptions(r io.Reader, opts ReaderOptions) (*Reader, error) {
	rd := &Reader{max: opts.MaxRecordSize, remaining: inputSize(r), keep: max(opts.MaxPacketBuffer, 0)}
	if rd.max <= 0 {
		rd.max = DefaultMaxRecordSize
	}
	raw := bufio.NewReaderSize(r, 64<<10)
	magic, _ := raw.Peek(4)
	switch {
	case bytes.HasPrefix(magic, gzipMagic):
		rd.compression = CompressionGzip
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return nil, rd.wrapStreamErr(0, "gzip header", err)
		}
		rd.br = bufio.NewReaderSize(zr, 64<<10)
		rd.remaining = -1
	case bytes.HasPrefix(magic, zstdMagic):
		rd.compression = CompressionZstd
		win := opts.MaxZstdWindow
		if win == 0 {
			win = DefaultMaxZstdWindow
		}
		if win < zstd.MinWindowSize {
			win = zstd.MinWindowSize
		}
		zr, err := zstd.NewReader(raw, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(win))
		if err != nil {
			return nil, rd.wrapStreamErr(0, "zstd header", err)
		}
		rd.zdec = zr
		rd.br = bufio.NewReaderSize(zr, 64<<10)
		rd.remaining = -1
	default:
		rd.br = raw
	}
	return rd, nil
}

// inputSize returns how many bytes r has left when that is knowable
// cheaply (in-memory readers, regular files), else -1.
func inputSize(r io.Reader) int64 {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len())
	case *os.File:
		st, err := v.Stat()
		if err != nil || !st.Mode().IsRegular() {
			return -1
		}
		pos, err := v.Seek(0, io.SeekCurrent)
		if err != nil || pos > st.Size() {
			return -1
		}
		return st.Size() - pos
	}
	return -1
}

// Compression reports how the input was compressed.
func (r *Reader) Compression() Compression { return r.compression }

// SkippedFields reports how many top-level fields other than Trace.packet
// were skipped so far.
func (r *Reader) SkippedFields() int { return r.skipped }

// ElidedRecords reports how many records were longer than
// ReaderOptions.MaxPacketBuffer (streamed, not read whole), and how many of
// their bytes were discarded unread.
func (r *Reader) ElidedRecords() (records int, bytes int64) { return r.elidedRecords, r.elidedBytes }

// Offset reports the offset in the Trace stream of the next unread byte.
func (r *Reader) Offset() int64 { return r.off }

// Close releases the decompressor, if any. It does not close the
// underlying reader.
func (r *Reader) Close() error {
	if r.zdec != nil {
		r.zdec.Close()
		r.zdec = nil
	}
	return nil
}

// Next returns the next packet. At a clean end of input it returns io.EOF;
// a record cut short returns an error wrapping [ErrTruncated]. After any
// error, Next keeps returning that error.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	for {
		start := r.off
		tag, err := r.readVarint(start, "tag")
		if err != nil {
			if err == io.EOF {
				r.err = io.EOF
			} else {
				r.err = err
			}
			return Record{}, r.err
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return Record{}, r.fail(start, ErrMalformed, "invalid field number %d (tag %#x)", num, tag)
		}
		if num == traceFieldPacket {
			if typ != protowire.BytesType {
				return Record{}, r.fail(start, ErrMalformed, "Trace.packet (field 1) has wire type %d, want 2", typ)
			}
			n, err := r.readLength(start)
			if err != nil {
				r.err = err
				return Record{}, err
			}
			if n > uint64(r.max) {
				return Record{}, r.fail(start, ErrRecordTooLarge, "length %d exceeds the maximum record size %d", n, r.max)
			}
			if r.remaining >= 0 && int64(n) > r.remaining {
				return Record{}, r.fail(start, ErrTruncated, "length %d exceeds the %d bytes left in the input", n, r.remaining)
			}
			if r.keep > 0 && n > uint64(r.keep) {
				rec, err := r.readElided(start, int(n))
				if err != nil {
					r.err = err
				}
				return rec, err
			}
			p, err := r.readPayload(start, int(n))
			if err != nil {
				r.err = err
				return Record{}, err
			}
			return Record{Offset: start, Packet: p, Size: len(p)}, nil
		}
		if err := r.skipField(start, num, typ); err != nil {
			r.err = err
			return Record{}, err
		}
		r.skipped++
	}
}

func (r *Reader) fail(off int64, kind error, format string, args ...any) error {
	r.err = fmt.Errorf("record at offset %d: %s: %w", off, fmt.Sprintf(format, args...), kind)
	return r.err
}

// wrapStreamErr classifies an error from the (decompressed) input.
func (r *Reader) wrapStreamErr(off int64, what string, err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("record at offset %d: input ends inside the %s: %w", off, what, ErrTruncated)
	}
	if r.compression != CompressionNone {
		return fmt.Errorf("record at offset %d: reading the %s: %s stream: %w: %w", off, what, r.compression, ErrMalformed, err)
	}
	return fmt.Errorf("record at offset %d: reading the %s: %w", off, what, err)
}

func (r *Reader) consumed(n int) {
	r.off += int64(n)
	if r.remaining >= 0 {
		r.remaining -= int64(n)
		if r.remaining < 0 {
			r.remaining = 0
		}
	}
}

// readVarint reads one varint. A clean EOF before its first byte returns
// io.EOF unwrapped.
func (r *Reader) readVarint(start int64, what string) (uint64, error) {
	var v uint64
	for i := 0; i < maxVarintLen; i++ {
		c, err := r.br.ReadByte()
		if err != nil {
			if err == io.EOF && i == 0 && what == "tag" {
				return 0, io.EOF
			}
			return 0, r.wrapStreamErr(start, what, err)
		}
		r.consumed(1)
		if i == maxVarintLen-1 && c > 1 {
			break
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("record at offset %d: %s varint overflows 64 bits: %w", start, what, ErrMalformed)
}

func (r *Reader) readLength(start int64) (uint64, error) {
	return r.readVarint(start, "length")
}

// readPayload reads n bytes into the reused buffer, growing it only as data
// arrives so that a lying length on a short stream costs little memory.
func (r *Reader) readPayload(start int64, n int) ([]byte, error) {
	const step = 64 << 10
	b := r.buf[:0]
	for len(b) < n {
		if len(b) == cap(b) {
			c := max(2*cap(b), step)
			if r.remaining >= 0 || c > n {
				c = n // exact when the input size vouched for n
			}
			nb := make([]byte, len(b), c)
			copy(nb, b)
			b = nb
		}
		m, err := r.br.Read(b[len(b):min(cap(b), n)])
		b = b[:len(b)+m]
		r.consumed(m)
		if err != nil && len(b) < n {
			r.buf = b[:0]
			if err == io.EOF {
				return nil, fmt.Errorf("record at offset %d: length %d but the input ends after %d bytes of it: %w", start, n, len(b), ErrTruncated)
			}
			return nil, r.wrapStreamErr(start, "packet", err)
		}
	}
	r.buf = b
	return b, nil
}

// skipField consumes one top-level field that is not Trace.packet.
func (r *Reader) skipField(start int64, num protowire.Number, typ protowire.Type) error {
	var n int64
	switch typ {
	case protowire.VarintType:
		_, err := r.readVarint(start, fmt.Sprintf("field %d varint", num))
		return err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		l, err := r.readLength(start)
		if err != nil {
			return err
		}
		if l > 1<<62 {
			return fmt.Errorf("record at offset %d: field %d length %d is impossible: %w", start, num, l, ErrMalformed)
		}
		n = int64(l)
	default:
		return fmt.Errorf("record at offset %d: field %d has unsupported wire type %d: %w", start, num, typ, ErrMalformed)
	}
	if r.remaining >= 0 && n > r.remaining {
		return fmt.Errorf("record at offset %d: field %d length %d exceeds the %d bytes left in the input: %w", start, num, n, r.remaining, ErrTruncated)
	}
	for n > 0 {
		chunk := int(min(n, 1<<30))
		d, err := r.br.Discard(chunk)
		r.consumed(d)
		n -= int64(d)
		if err != nil {
			if err == io.EOF {
				return fmt.Errorf("record at offset %d: input ends inside field %d: %w", start, num, ErrTruncated)
			}
			return r.wrapStreamErr(start, fmt.Sprintf("field %d", num), err)
		}
	}
	return nil
}

// ReadAll reads every packet of a trace into memory (copies), for tests and
// small files. It returns the packets read before any error.
func ReadAll(r io.Reader) ([][]byte, error) {
	rd, err := NewReader(r)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out [][]byte
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, bytes.Clone(rec.Packet))
	}
}
