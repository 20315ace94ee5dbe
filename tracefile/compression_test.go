package tracefile

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func compress(t testing.TB, kind Compression, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch kind {
	case CompressionGzip:
		w = gzip.NewWriter(&buf)
	case CompressionZstd:
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCompressedRoundTrip(t *testing.T) {
	pkts := samplePackets()
	raw := encodeTrace(pkts)
	for _, kind := range []Compression{CompressionGzip, CompressionZstd} {
		t.Run(kind.String(), func(t *testing.T) {
			file := compress(t, kind, raw)
			rd, err := NewReader(bytes.NewReader(file))
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			if rd.Compression() != kind {
				t.Fatalf("detected %v", rd.Compression())
			}
			for i, want := range pkts {
				rec, err := rd.Next()
				if err != nil {
					t.Fatalf("packet %d: %v", i, err)
				}
				if !bytes.Equal(rec.Packet, want) {
					t.Fatalf("packet %d differs", i)
				}
			}
			if _, err := rd.Next(); err != io.EOF {
				t.Fatalf("end: %v", err)
			}
		})
	}
}

// TestCompressedConcatenated: rotated/appended compressed streams
// concatenate (gzip members, zstd frames).
func TestCompressedConcatenated(t *testing.T) {
	a := encodeTrace([][]byte{{1}, {2}})
	b := encodeTrace([][]byte{{3}})
	for _, kind := range []Compression{CompressionGzip, CompressionZstd} {
		file := append(compress(t, kind, a), compress(t, kind, b)...)
		pkts, err := ReadAll(bytes.NewReader(file))
		if err != nil || len(pkts) != 3 || pkts[2][0] != 3 {
			t.Fatalf("%v: %d packets, %v", kind, len(pkts), err)
		}
	}
}

func TestCompressedTruncated(t *testing.T) {
	var pkts [][]byte
	for i := 0; i < 2000; i++ {
		pkts = append(pkts, bytes.Repeat([]byte{byte(i)}, 100+i%50))
	}
	raw := encodeTrace(pkts)
	for _, kind := range []Compression{CompressionGzip, CompressionZstd} {
		file := compress(t, kind, raw)
		for _, cut := range []int{len(file) / 3, len(file) / 2, len(file) - 5} {
			rd, err := NewReader(bytes.NewReader(file[:cut]))
			if err != nil {
				t.Fatalf("%v cut %d: %v", kind, cut, err)
			}
			n := 0
			for {
				rec, err := rd.Next()
				if err != nil {
					if !errors.Is(err, ErrTruncated) {
						t.Fatalf("%v cut %d: after %d packets: %v, want ErrTruncated", kind, cut, n, err)
					}
					break
				}
				if !bytes.Equal(rec.Packet, pkts[n]) {
					t.Fatalf("%v cut %d: packet %d differs", kind, cut, n)
				}
				n++
			}
			if n == len(pkts) && cut < len(file)-8 {
				t.Fatalf("%v cut %d: read every packet from a cut stream", kind, cut)
			}
			rd.Close()
		}
	}
}

func TestCorruptCompressedStream(t *testing.T) {
	file := compress(t, CompressionGzip, encodeTrace(samplePackets()))
	file[len(file)/2] ^= 0xff
	file[len(file)/2+1] ^= 0xff
	_, err := ReadAll(bytes.NewReader(file))
	if err == nil {
		t.Fatal("corrupt gzip read without error")
	}
	if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTruncated) {
		t.Fatalf("corrupt gzip: unclassified error %v", err)
	}
}
