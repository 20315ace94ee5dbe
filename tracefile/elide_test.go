package tracefile

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/protobuf/encoding/protowire"
)

// bigPacketHeader is a TracePacket's head: timestamp 77, sequence 9,
// previous_packet_dropped, then the tag and length of a for_testing payload
// of n bytes (the payload itself follows).
func bigPacketHeader(n int) []byte {
	var p []byte
	p = protowire.AppendTag(p, FieldTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, 77)
	p = protowire.AppendTag(p, FieldTrustedSequenceID, protowire.VarintType)
	p = protowire.AppendVarint(p, 9)
	p = protowire.AppendTag(p, FieldPreviousPacketDropped, protowire.VarintType)
	p = protowire.AppendVarint(p, 3)
	p = protowire.AppendTag(p, FieldForTesting, protowire.BytesType)
	return protowire.AppendVarint(p, uint64(n))
}

// writeBigTrace streams a trace of one small packet, one packet with an
// n-byte for_testing payload (zeros), and another small packet to w,
// without ever holding the big payload.
func writeBigTrace(t testing.TB, w io.Writer, n int) {
	t.Helper()
	small := []byte{0x40, 0x05}
	hdr := bigPacketHeader(n)
	var b []byte
	b = AppendRecord(b, small)
	b = AppendRecordHeader(b, len(hdr)+n)
	b = append(b, hdr...)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(w, zeros{}, int64(n)); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(AppendRecord(nil, small)); err != nil {
		t.Fatal(err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReaderStreamsOversizedRecord(t *testing.T) {
	const n = 1 << 20
	var raw bytes.Buffer
	writeBigTrace(t, &raw, n)
	for _, kind := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
		t.Run(kind.String(), func(t *testing.T) {
			in := raw.Bytes()
			if kind != CompressionNone {
				in = compress(t, kind, in)
			}
			rd, err := NewReaderOptions(bytes.NewReader(in), ReaderOptions{MaxPacketBuffer: 4096})
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			var recs []Record
			for {
				rec, err := rd.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				rec.Packet = bytes.Clone(rec.Packet)
				recs = append(recs, rec)
			}
			if len(recs) != 3 {
				t.Fatalf("%d records, want 3", len(recs))
			}
			big := recs[1]
			hdr := bigPacketHeader(n)
			if big.Size != len(hdr)+n {
				t.Fatalf("Size %d, want %d", big.Size, len(hdr)+n)
			}
			wantElided := int64(protowire.SizeTag(FieldForTesting) + protowire.SizeVarint(n) + n)
			if big.Elided != wantElided || big.ElidedFields != 1 {
				t.Fatalf("elided %d bytes in %d fields, want %d in 1", big.Elided, big.ElidedFields, wantElided)
			}
			info, err := DecodePacket(big.Packet)
			if err != nil {
				t.Fatalf("the kept head does not decode: %v", err)
			}
			if info.Timestamp != 77 || info.SequenceID != 9 || info.PreviousPacketDropped != 3 ||
				info.PayloadField != FieldForTesting || len(info.Payload) != 0 {
				t.Fatalf("kept head %+v", info)
			}
			for _, i := range []int{0, 2} {
				if recs[i].Elided != 0 || recs[i].Size != 2 || !bytes.Equal(recs[i].Packet, []byte{0x40, 0x05}) {
					t.Fatalf("record %d: %+v", i, recs[i])
				}
			}
			if r, b := rd.ElidedRecords(); r != 1 || b != wantElided {
				t.Fatalf("ElidedRecords %d, %d", r, b)
			}
		})
	}
}

// TestReaderOversizedRecordBoundedMemory reads a gzip file holding one
// 64 MiB record: streamed, the reader allocates a small fraction of it
// (read whole, it would allocate at least the record).
func TestReaderOversizedRecordBoundedMemory(t *testing.T) {
	const n = 64 << 20
	for _, kind := range []Compression{CompressionGzip, CompressionZstd} {
		t.Run(kind.String(), func(t *testing.T) {
			var file bytes.Buffer
			var w io.WriteCloser
			if kind == CompressionGzip {
				w = gzip.NewWriter(&file)
			} else {
				zw, err := zstd.NewWriter(&file)
				if err != nil {
					t.Fatal(err)
				}
				w = zw
			}
			writeBigTrace(t, w, n)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			rd, err := NewReaderOptions(bytes.NewReader(file.Bytes()), ReaderOptions{MaxPacketBuffer: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			packets := 0
			for {
				rec, err := rd.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				packets++
				if rec.Size > n && rec.Elided == 0 {
					t.Fatal("the big record was read whole")
				}
			}
			rd.Close()
			runtime.ReadMemStats(&after)
			if packets != 3 {
				t.Fatalf("%d packets", packets)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > n/4 {
				t.Fatalf("reading allocated %d bytes for a %d-byte record", alloc, n)
			}
		})
	}
}

// TestReaderOversizedMalformed: a streamed record whose fields stop
// parsing is still framed (the next record is read) and decodes as
// malformed, as it would read whole.
func TestReaderOversizedMalformed(t *testing.T) {
	bad := [][]byte{
		append([]byte{0x40, 0x01, 0x0b}, make([]byte, 100)...),       // group start
		append([]byte{0x40, 0x01, 0x00}, make([]byte, 100)...),       // field 0
		append([]byte{0x40, 0x01, 0x5a, 0x7f}, make([]byte, 100)...), // length past the record
		append([]byte{0x40}, bytes.Repeat([]byte{0xff}, 100)...),     // varint overflow
	}
	for i, p := range bad {
		if _, err := DecodePacket(p); err == nil && i != 0 {
			t.Fatalf("case %d decodes whole", i)
		}
		in := encodeTrace([][]byte{p, {0x40, 0x02}})
		rd, err := NewReaderOptions(bytes.NewReader(in), ReaderOptions{MaxPacketBuffer: 16})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if rec.Size != len(p) || rec.Elided == 0 {
			t.Fatalf("case %d: size %d elided %d", i, rec.Size, rec.Elided)
		}
		if _, err := DecodePacket(rec.Packet); !errors.Is(err, ErrBadPacket) {
			t.Fatalf("case %d: streamed packet decodes: %v", i, err)
		}
		rec, err = rd.Next()
		if err != nil || !bytes.Equal(rec.Packet, []byte{0x40, 0x02}) {
			t.Fatalf("case %d: next record %v %v", i, rec.Packet, err)
		}
	}
}

func TestReaderOversizedTruncated(t *testing.T) {
	p := append(bigPacketHeader(1000), make([]byte, 1000)...)
	in := encodeTrace([][]byte{p})
	in = in[:len(in)-10]
	// An unknown-size input: the length is not checked up front.
	rd, err := NewReaderOptions(io.MultiReader(bytes.NewReader(in)), ReaderOptions{MaxPacketBuffer: 16})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Next(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("got %v, want ErrTruncated", err)
	}
}
