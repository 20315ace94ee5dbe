package tracefile

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
)

func TestFramingRoundTrip(t *testing.T) {
	pkts := samplePackets()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, p := range pkts {
		if err := w.WritePacket(p); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(buf.Bytes(), encodeTrace(pkts)) {
		t.Fatal("Writer and AppendRecord disagree")
	}
	if w.Written() != int64(buf.Len()) {
		t.Fatalf("Written() = %d, want %d", w.Written(), buf.Len())
	}
	total := 0
	for _, p := range pkts {
		total += RecordSize(len(p))
	}
	if total != buf.Len() {
		t.Fatalf("sum of RecordSize = %d, file is %d", total, buf.Len())
	}
	rd, err := NewReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for i, want := range pkts {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if rec.Offset != off {
			t.Errorf("packet %d offset %d, want %d", i, rec.Offset, off)
		}
		off += int64(RecordSize(len(want)))
		if !bytes.Equal(rec.Packet, want) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("end: got %v, want io.EOF", err)
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("EOF is not sticky: %v", err)
	}
}

// TestVectorFileRecords checks test-vectors.md §4 items 5 and 6: the
// trusted suffix and the three file records, byte for byte.
func TestVectorFileRecords(t *testing.T) {
	tr := Trusted{UID: 1000, SequenceID: 2, PID: 1234, HasPID: true}
	suffix := AppendTrusted(nil, tr)
	if want := unhex(t, "18 e8 07 50 02 f8 04 d2 09"); !bytes.Equal(suffix, want) {
		t.Fatalf("trusted suffix % x, want % x", suffix, want)
	}
	tr.PreviousPacketDropped = 0x41
	if got, want := AppendTrusted(nil, tr), unhex(t, "18 e8 07 50 02 f8 04 d2 09 d0 02 41"); !bytes.Equal(got, want) {
		t.Fatalf("trusted suffix with loss % x, want % x", got, want)
	}
	producer := [][]byte{
		unhex(t, "40 e8 07 a2 38 04 0a 02 68 69"),
		unhex(t, "a2 38 8c 80 80 00 0a 0a 41 42 43 44 45 46 47 48 49 4a"),
		unhex(t, "40 d0 0f"),
	}
	var file []byte
	for _, p := range producer {
		file = AppendRecord(file, AppendTrusted(append([]byte(nil), p...), Trusted{UID: 1000, SequenceID: 2, PID: 1234, HasPID: true}))
	}
	want := unhex(t, `0a 13 40 e8 07 a2 38 04 0a 02 68 69 18 e8 07 50 02 f8 04 d2 09
0a 1b a2 38 8c 80 80 00 0a 0a 41 42 43 44 45 46 47 48 49 4a 18 e8 07 50 02 f8 04 d2 09
0a 0c 40 d0 0f 18 e8 07 50 02 f8 04 d2 09`)
	if !bytes.Equal(file, want) {
		t.Fatalf("file records\n% x\nwant\n% x", file, want)
	}
	pkts, err := ReadAll(bytes.NewReader(want))
	if err != nil || len(pkts) != 3 {
		t.Fatalf("ReadAll: %d packets, %v", len(pkts), err)
	}
	for i, p := range pkts {
		info, err := DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.SequenceID != 2 || info.TrustedUID != 1000 || !info.HasTrustedPID || info.TrustedPID != 1234 || info.PreviousPacketDropped != 0 {
			t.Errorf("packet %d: trusted fields %+v", i, info)
		}
	}
	info, _ := DecodePacket(pkts[0])
	if !info.HasTimestamp || info.Timestamp != 1000 || info.Kind() != "for_testing" {
		t.Errorf("P1 decoded as %+v kind %q", info, info.Kind())
	}
}

func TestTrustedNegativeAndOptional(t *testing.T) {
	b := AppendTrusted(nil, Trusted{UID: -1, SequenceID: 7, MachineID: 3})
	info, err := DecodePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	if info.TrustedUID != -1 || info.SequenceID != 7 || info.HasTrustedPID || info.MachineID != 3 {
		t.Fatalf("got %+v", info)
	}
	if len(b) != 1+10+2+3 {
		t.Fatalf("uid -1 must be a 10-byte varint: % x", b)
	}
	b = AppendFirstPacketOnSequence(nil)
	if !bytes.Equal(b, []byte{0xb8, 0x05, 0x01}) {
		t.Fatalf("first_packet_on_sequence % x", b)
	}
}

// TestTruncatedAtEveryCut cuts a trace at every byte and checks that every
// complete packet before the cut is returned, then io.EOF exactly at record
// boundaries and ErrTruncated everywhere else.
func TestTruncatedAtEveryCut(t *testing.T) {
	pkts := [][]byte{{1, 2, 3}, make([]byte, 200), {}, {9}}
	file := encodeTrace(pkts)
	bounds := map[int]int{0: 0}
	off := 0
	for i, p := range pkts {
		off += RecordSize(len(p))
		bounds[off] = i + 1
	}
	for cut := 0; cut <= len(file); cut++ {
		for _, sized := range []bool{true, false} {
			var src io.Reader = bytes.NewReader(file[:cut])
			if !sized {
				src = io.MultiReader(src) // hides Len(): size unknown
			}
			rd, _ := NewReader(src)
			n := 0
			var err error
			for {
				_, err = rd.Next()
				if err != nil {
					break
				}
				n++
			}
			if want, ok := bounds[cut]; ok {
				if err != io.EOF || n != want {
					t.Fatalf("cut %d sized=%v: %d packets, %v; want %d, EOF", cut, sized, n, err, want)
				}
				continue
			}
			if !errors.Is(err, ErrTruncated) {
				t.Fatalf("cut %d sized=%v: error %v, want ErrTruncated", cut, sized, err)
			}
			complete := 0
			for b, k := range bounds {
				if b < cut && k > complete {
					complete = k
				}
			}
			if n != complete {
				t.Fatalf("cut %d: %d packets before truncation, want %d", cut, n, complete)
			}
			if !strings.Contains(err.Error(), "record at offset") {
				t.Fatalf("error does not name the offset: %v", err)
			}
		}
	}
}

func TestRecordTooLarge(t *testing.T) {
	file := AppendRecord(nil, []byte{1, 2, 3})
	file = append(file, 0x0a)
	file = appendVarintRaw(file, 999999999)
	file = append(file, 1, 2, 3)
	rd, _ := NewReader(bytes.NewReader(file))
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	_, err := rd.Next()
	if !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("got %v, want ErrRecordTooLarge", err)
	}
	want := "record at offset 5: length 999999999 exceeds the maximum record size 268435456"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
	rd, _ = NewReaderOptions(bytes.NewReader(AppendRecord(nil, make([]byte, 100))), ReaderOptions{MaxRecordSize: 99})
	if _, err := rd.Next(); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("custom guard: %v", err)
	}
}

// TestLyingLengthAllocatesLittle: a record claiming 200 MB on a stream of
// unknown size that holds 10 bytes must not allocate anything like 200 MB.
func TestLyingLengthAllocatesLittle(t *testing.T) {
	file := append([]byte{0x0a}, appendVarintRaw(nil, 200<<20)...)
	file = append(file, make([]byte, 10)...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rd, _ := NewReader(io.MultiReader(bytes.NewReader(file)))
	_, err := rd.Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("got %v, want ErrTruncated", err)
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 4<<20 {
		t.Fatalf("allocated %d bytes for a 10-byte payload", d)
	}
	// Known size: refused before reading, naming what is left.
	rd, _ = NewReader(bytes.NewReader(file))
	_, err = rd.Next()
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "exceeds the 10 bytes left") {
		t.Fatalf("sized input: %v", err)
	}
}

func TestSkipsUnknownTopLevelFields(t *testing.T) {
	var file []byte
	file = append(file, 0x10, 0x96, 0x01)             // field 2 varint 150
	file = append(file, 0x1a, 0x03, 'a', 'b', 'c')    // field 3 bytes
	file = AppendRecord(file, []byte{0x40, 0x01})     // packet
	file = append(file, 0x25, 1, 2, 3, 4)             // field 4 fixed32
	file = append(file, 0x29, 1, 2, 3, 4, 5, 6, 7, 8) // field 5 fixed64
	file = append(file, 0xa2, 0x06, 0x02, 0xff, 0xee) // field 100 bytes
	file = AppendRecord(file, []byte{0x40, 0x02})     // packet
	rd, _ := NewReader(bytes.NewReader(file))
	var got [][]byte
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, bytes.Clone(rec.Packet))
	}
	if len(got) != 2 || got[0][1] != 1 || got[1][1] != 2 {
		t.Fatalf("packets %x", got)
	}
	if rd.SkippedFields() != 5 {
		t.Fatalf("skipped %d fields, want 5", rd.SkippedFields())
	}
	// A skipped field cut short is a truncation.
	rd, _ = NewReader(bytes.NewReader([]byte{0x1a, 0x05, 'a'}))
	if _, err := rd.Next(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("cut unknown field: %v", err)
	}
}

func TestMalformed(t *testing.T) {
	cases := map[string][]byte{
		"field 1 varint":  {0x08, 0x01},
		"field 0":         {0x02, 0x00},
		"group":           {0x13, 0x14},
		"varint overflow": {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f},
	}
	for name, b := range cases {
		file := append(AppendRecord(nil, []byte{1}), b...)
		rd, _ := NewReader(bytes.NewReader(file))
		if _, err := rd.Next(); err != nil {
			t.Fatalf("%s: first record: %v", name, err)
		}
		_, err := rd.Next()
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "record at offset 3") {
			t.Errorf("%s: got %v, want ErrMalformed at offset 3", name, err)
		}
	}
}

func appendVarintRaw(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}
