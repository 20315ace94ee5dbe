package tracefile

import (
	"bytes"
	"io"
	"testing"
)

// BenchmarkReader measures streaming 1 KiB packets out of an in-memory
// trace.
func BenchmarkReader(b *testing.B) {
	pkt := bytes.Repeat([]byte{0x40}, 1<<10)
	var file []byte
	for i := 0; i < 1024; i++ {
		file = AppendRecord(file, pkt)
	}
	b.SetBytes(int64(len(file)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rd, _ := NewReader(bytes.NewReader(file))
		for {
			if _, err := rd.Next(); err == io.EOF {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkAppendTrusted measures stamping one packet's trusted suffix.
func BenchmarkAppendTrusted(b *testing.B) {
	dst := make([]byte, 0, 64)
	t := Trusted{UID: 1000, SequenceID: 2, PID: 1234, HasPID: true, PreviousPacketDropped: 65}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dst = AppendTrusted(dst[:0], t)
	}
	b.SetBytes(int64(len(dst)))
}

// BenchmarkDecodePacket measures the top-level decode used by filters and
// inspect.
func BenchmarkDecodePacket(b *testing.B) {
	p := AppendTimestamp(nil, 12345)
	p = append(p, 0x5a, 0x40)
	p = append(p, bytes.Repeat([]byte{0x08, 0x01}, 32)...)
	p = AppendTrusted(p, Trusted{UID: 1000, SequenceID: 2, PID: 1234, HasPID: true})
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := DecodePacket(p); err != nil {
			b.Fatal(err)
		}
	}
}
