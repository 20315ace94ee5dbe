package tracefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fuzzSeeds are the named seeds `go generate` writes to testdata/fuzz
// (writeFuzzCorpus, main_test.go).
func fuzzSeeds(t testing.TB) map[string]map[string][]byte {
	ts := fullTraceStats()
	statsPkt := AppendTraceStatsPacket(nil, &ts, 0, 1)
	minimal := unhex(t, minimalTrace)
	withUnknown := append([]byte{0x10, 0x01, 0x1a, 0x01, 0x00, 0x25, 1, 2, 3, 4}, minimal...)
	small := encodeTrace([][]byte{{0x40, 0x01}, {}, {0x5a, 0x00}})
	gz := compress(t, CompressionGzip, small)
	zs := compress(t, CompressionZstd, small)
	stats := statsPkt[bytes.Index(statsPkt, []byte{0x9a, 0x02})+3:]
	return map[string]map[string][]byte{
		"FuzzReader": {
			"minimal_trace":  minimal,
			"unknown_fields": withUnknown,
			"truncated":      minimal[:50],
			"too_large":      {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x01},
			"gzip":           gz,
			"zstd":           zs,
			"gzip_cut":       gz[:len(gz)/2],
			"stats":          AppendRecord(nil, statsPkt),
			"bad_wire_type":  {0x0b, 0x0c},
		},
		"FuzzDecodePacket": {
			"track_event":  minimal[2+0x12+2 : 2+0x12+2+0x13],
			"stats_packet": statsPkt,
			"trusted":      AppendTrusted([]byte{0x40, 0x01}, Trusted{UID: -5, SequenceID: 3, PID: 9, HasPID: true, PreviousPacketDropped: 257}),
			"cut_field":    {0x5a, 0x05, 0x01},
		},
		"FuzzAppendRestorePacket": {
			"state":     restoreFuzzSeed(restoreState(), 3, 65),
			"empty":     restoreFuzzSeed(nil, 1, 0),
			"cut_field": restoreFuzzSeed([]byte{0x62, 0x05, 0x01}, 7, 1),
			"group":     restoreFuzzSeed([]byte{0x08, 0x01, 0x0b, 0x0c}, 2, 0),
		},
		"FuzzDecodeTraceStats": {
			"full":      stats,
			"empty":     {},
			"packed":    {0x88, 0x01, 0x08, 0x92, 0x01, 0x05, 0x08, 0x03, 0x12, 0x01, 0x02},
			"bad_nest":  {0x0a, 0x03, 0x18, 0x80, 0x80},
			"filter":    {0x5a, 0x04, 0xa2, 0x01, 0x01, 0x07},
			"truncated": stats[:len(stats)/2],
		},
	}
}

// writeFuzzCorpus rewrites the committed seed corpora from fuzzSeeds.
func writeFuzzCorpus(t testing.TB) error {
	for target, seeds := range fuzzSeeds(t) {
		dir := filepath.Join("testdata", "fuzz", target)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for name, b := range seeds {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if target == "FuzzAppendRestorePacket" {
				content = string(b) // several arguments: restoreFuzzSeed wrote the whole file
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

const fuzzGuard = 1 << 20

func FuzzReader(f *testing.F) {
	f.Add(encodeTrace([][]byte{{0x40, 0x01}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		rd, err := NewReaderOptions(bytes.NewReader(data), ReaderOptions{MaxRecordSize: fuzzGuard, MaxZstdWindow: fuzzGuard})
		if err != nil {
			if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("NewReader: unclassified %v", err)
			}
			return
		}
		defer rd.Close()
		last := int64(-1)
		var framed int
		for {
			rec, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrRecordTooLarge) {
					t.Fatalf("unclassified error %v", err)
				}
				break
			}
			if rec.Offset <= last || len(rec.Packet) > fuzzGuard {
				t.Fatalf("record at %d after %d, %d bytes", rec.Offset, last, len(rec.Packet))
			}
			last = rec.Offset
			framed += RecordSize(len(rec.Packet))
		}
		if rd.Compression() == CompressionNone && framed > len(data) {
			t.Fatalf("%d framed bytes from %d input bytes", framed, len(data))
		}
		checkStreamedLikeWhole(t, data)
		s, err := SummarizeOptions(bytes.NewReader(data), SummaryOptions{FirstN: 2, MaxRecordSize: fuzzGuard})
		if err == nil && s.Packets < 0 {
			t.Fatal("negative count")
		}
	})
}

func FuzzDecodePacket(f *testing.F) {
	f.Add([]byte{0x40, 0x01, 0x5a, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = DumpPacket(data)
		info, err := DecodePacket(data)
		if err != nil {
			if !errors.Is(err, ErrBadPacket) {
				t.Fatalf("unclassified %v", err)
			}
			return
		}
		if info.Size != len(data) {
			t.Fatalf("size %d of %d", info.Size, len(data))
		}
		// The service's appended trusted fields always win.
		tr := Trusted{UID: 1234, SequenceID: 77, PID: -3, HasPID: true, PreviousPacketDropped: 65}
		stamped := AppendTrusted(bytes.Clone(data), tr)
		got, err := DecodePacket(stamped)
		if err != nil {
			t.Fatalf("stamping a valid packet broke it: %v", err)
		}
		if got.TrustedUID != tr.UID || got.SequenceID != tr.SequenceID || got.TrustedPID != tr.PID || got.PreviousPacketDropped != 65 {
			t.Fatalf("stamped fields lost: %+v", got)
		}
		if got.PayloadField != info.PayloadField {
			t.Fatalf("stamping changed the kind: %d → %d", info.PayloadField, got.PayloadField)
		}
	})
}

func FuzzDecodeTraceStats(f *testing.F) {
	f.Add([]byte{0x0a, 0x02, 0x18, 0x05})
	f.Add(AppendTraceStatsMessage(nil, &TraceStats{Tracepipe: &TracepipeStats{SinkReconnects: 1, TriggersRefused: 2,
		PeerSinks: []PeerSinkStats{{Index: 1, Name: "sinks[1]", Destination: "relay tcp://h:1", PacketsDropped: 3, Failed: 1, Error: "refused"}}}}))
	// A receiver's section (serve), with a gap range.
	recv := &ReceiverStats{Machine: 7, Hostname: "h", BatchesStored: 3, BatchesMissing: 2, Gaps: 1, SenderStats: true, GapRanges: []GapRange{{2, 3}}}
	f.Add(AppendTraceStatsMessage(nil, &TraceStats{Tracepipe: &TracepipeStats{Receiver: recv}}))
	f.Add(AppendReceiverOnlyTraceStats(nil, recv)[2:])
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := DecodeTraceStats(data)
		if err != nil {
			if !errors.Is(err, ErrBadTraceStats) {
				t.Fatalf("unclassified %v", err)
			}
			return
		}
		_ = LossReport(ts)
		enc := AppendTraceStats(nil, &ts)
		again, ok, err := DecodeTraceStatsPacket(enc)
		if err != nil || !ok {
			t.Fatalf("re-decode: ok=%v %v", ok, err)
		}
		if !reflect.DeepEqual(again, ts) {
			t.Fatalf("round trip unstable\n%+v\n%+v", ts, again)
		}
	})
}

// checkStreamedLikeWhole reads data whole and with a tiny packet buffer:
// the same records at the same offsets and sizes, the same error class,
// records under the buffer byte-identical, and a streamed packet decodes
// only if the whole one does.
func checkStreamedLikeWhole(t *testing.T, data []byte) {
	opts := ReaderOptions{MaxRecordSize: fuzzGuard, MaxZstdWindow: fuzzGuard}
	whole, err := NewReaderOptions(bytes.NewReader(data), opts)
	if err != nil {
		return
	}
	defer whole.Close()
	opts.MaxPacketBuffer = 8
	streamed, err := NewReaderOptions(bytes.NewReader(data), opts)
	if err != nil {
		t.Fatalf("streamed reader fails where the whole one did not: %v", err)
	}
	defer streamed.Close()
	for {
		a, errA := whole.Next()
		b, errB := streamed.Next()
		if (errA == nil) != (errB == nil) || (errA == io.EOF) != (errB == io.EOF) ||
			errors.Is(errA, ErrTruncated) != errors.Is(errB, ErrTruncated) {
			t.Fatalf("whole read %v, streamed read %v", errA, errB)
		}
		if errA != nil {
			return
		}
		if a.Offset != b.Offset || b.Size != len(a.Packet) {
			t.Fatalf("record at %d (%d bytes) streamed as at %d (%d bytes)", a.Offset, len(a.Packet), b.Offset, b.Size)
		}
		if b.Elided == 0 && !bytes.Equal(a.Packet, b.Packet) {
			t.Fatalf("record at %d not elided but different", a.Offset)
		}
		if len(b.Packet) > 8+MaxRecordHeaderSize+1 && b.Elided > 0 {
			t.Fatalf("streamed record kept %d bytes", len(b.Packet))
		}
		if _, err := DecodePacket(b.Packet); err == nil {
			if _, err := DecodePacket(a.Packet); err != nil {
				t.Fatalf("record at %d: streamed decodes, whole does not: %v", a.Offset, err)
			}
		}
	}
}
