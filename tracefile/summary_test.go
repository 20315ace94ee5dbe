package tracefile

import (
	"bytes"
	"strings"
	"testing"
)

// minimalTrace is test-vectors.md §8 (91 bytes).
const minimalTrace = `0a 12 50 01 e2 03 0d 08 d2 09 12 08 6d 79 20 74 72 61 63 6b
0a 13 40 e8 07 50 01 5a 0c 48 01 58 d2 09 ba 01 04 77 6f 72 6b
0a 0c 40 d0 0f 50 01 5a 05 48 02 58 d2 09
0a 11 50 01 e2 03 0c 08 ae 2c 12 05 64 65 70 74 68 42 00
0a 0f 40 dc 0b 50 01 5a 08 48 04 58 ae 2c f0 01 2a`

func TestDecodeMinimalTrace(t *testing.T) {
	file := unhex(t, minimalTrace)
	if len(file) != 91 {
		t.Fatalf("vector is %d bytes", len(file))
	}
	pkts, err := ReadAll(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{"track_descriptor", "track_event", "track_event", "track_descriptor", "track_event"}
	ts := []uint64{0, 1000, 2000, 0, 1500}
	for i, p := range pkts {
		info, err := DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.Kind() != kinds[i] || info.SequenceID != 1 || info.Timestamp != ts[i] || info.HasTimestamp != (ts[i] != 0) {
			t.Errorf("packet %d: %+v kind %q", i, info, info.Kind())
		}
	}
	dump := DumpPacket(pkts[0])
	for _, want := range []string{"trusted_packet_sequence_id: 1", "track_descriptor {", "uuid: 1234", `name: "my track"`} {
		if !strings.Contains(dump, want) {
			t.Errorf("dump lacks %q:\n%s", want, dump)
		}
	}
}

func TestDecodePacketRules(t *testing.T) {
	// Last occurrence wins; interned_data alone names the kind; a payload
	// beats interned_data.
	p := []byte{0x50, 0x05, 0x50, 0x07, 0x62, 0x00}
	info, err := DecodePacket(p)
	if err != nil || info.SequenceID != 7 || info.Kind() != "interned_data" {
		t.Fatalf("%+v %v", info, err)
	}
	p = append(p, 0x3a, 0x00) // sys_stats {}
	if info, _ = DecodePacket(p); info.Kind() != "sys_stats" {
		t.Fatalf("kind %q", info.Kind())
	}
	p = append(p, 0xc8, 0x3e, 0x01) // field 1001 varint: unknown payload
	if info, _ = DecodePacket(p); info.Kind() != "field_1001" {
		t.Fatalf("kind %q", info.Kind())
	}
	if info, _ = DecodePacket(nil); info.Kind() != "" {
		t.Fatalf("empty packet kind %q", info.Kind())
	}
	info, _ = DecodePacket([]byte{0xc8, 0x02, 0x01, 0xb8, 0x05, 0x01, 0xd0, 0x02, 0x81, 0x02})
	if info.SequenceFlags != 1 || !info.FirstPacketOnSequence || info.PreviousPacketDropped != 257 {
		t.Fatalf("flags %+v", info)
	}
	if _, err := DecodePacket([]byte{0x5a, 0x05, 0x01}); err == nil || !strings.Contains(err.Error(), "field 11 (track_event)") {
		t.Fatalf("truncated field: %v", err)
	}
	if LossReasonString(257) != "PRESENT|SMB_FULL" || LossReasonString(27) != "PRESENT|READ_GAP|ORPHAN_CONTINUATION|REASSEMBLY_GAP" {
		t.Fatalf("loss strings %q %q", LossReasonString(257), LossReasonString(27))
	}
}

func TestServicePackets(t *testing.T) {
	b := AppendServiceHeader(nil, 0)
	b = AppendTimestamp(b, 5)
	b = AppendClockSnapshot(b, []Clock{{ID: ClockBoottime, Timestamp: 100}, {ID: 64, Timestamp: 7, IsIncremental: true, UnitMultiplierNs: 1000}}, ClockBoottime)
	info, err := DecodePacket(b)
	if err != nil || info.Kind() != "clock_snapshot" || info.SequenceID != 1 || info.TimestampClockID != 6 {
		t.Fatalf("%+v %v", info, err)
	}
	want := []byte{0x32, 0x13, 0x0a, 0x04, 0x08, 0x06, 0x10, 0x64, 0x0a, 0x09, 0x08, 0x40, 0x10, 0x07, 0x18, 0x01, 0x20, 0xe8, 0x07, 0x10, 0x06}
	if !bytes.Equal(info.Payload, want[2:]) {
		t.Fatalf("clock snapshot % x, want % x", info.Payload, want[2:])
	}
	b = AppendTraceProvenance(nil, [][]ProvenanceSequence{{{ID: 2, ProducerID: 1}}, {}})
	// 124 LEN {2 LEN {1 LEN {1: 2, 2: 1}}, 2 LEN {}}
	if want := []byte{0xe2, 0x07, 0x0a, 0x12, 0x06, 0x0a, 0x04, 0x08, 0x02, 0x10, 0x01, 0x12, 0x00}; !bytes.Equal(b, want) {
		t.Fatalf("provenance % x, want % x", b, want)
	}
	b = AppendServiceEvent(nil, EventTracingStarted, 0)
	if want := []byte{0xaa, 0x04, 0x02, 0x10, 0x01}; !bytes.Equal(b, want) {
		t.Fatalf("service event % x, want % x", b, want)
	}
	b = AppendServiceEvent(nil, EventBufferCloned, 3)
	if want := []byte{0xaa, 0x04, 0x02, 0x58, 0x03}; !bytes.Equal(b, want) {
		t.Fatalf("buffer_cloned % x", b)
	}
	b = AppendSyncMarkerPacket(nil, 0)
	if !bytes.HasSuffix(b, append([]byte{0xa2, 0x02, 0x10}, SyncMarker[:]...)) {
		t.Fatalf("sync marker % x", b)
	}
	b = AppendTraceUUID(nil, 1, -1)
	if info, _ := DecodePacket(b); info.Kind() != "trace_uuid" || len(info.Payload) != 2+11 {
		t.Fatalf("uuid % x", b)
	}
	// A long nested message needs a 2-byte length: appendNested must shift.
	clocks := make([]Clock, 40)
	b = AppendClockSnapshot([]byte{0x40, 0x01}, clocks, 0)
	info, err = DecodePacket(b)
	if err != nil || info.Kind() != "clock_snapshot" || len(info.Payload) != 40*6 {
		t.Fatalf("long snapshot: %v len %d", err, len(info.Payload))
	}
}

func TestSummarize(t *testing.T) {
	var file []byte
	add := func(p []byte) { file = AppendRecord(file, p) }
	for i := 0; i < 5; i++ {
		p := AppendTimestamp(nil, uint64(100+i))
		p = append(p, 0x5a, 0x00) // track_event {}
		tr := Trusted{UID: 1, SequenceID: 2}
		if i == 3 {
			tr.PreviousPacketDropped = 65
		}
		add(AppendTrusted(p, tr))
	}
	add(AppendTrusted(append(AppendTimestamp(nil, 50), 0x3a, 0x00), Trusted{SequenceID: 3}))
	ts1 := TraceStats{BufferStats: []BufferStats{{ChunksOverwritten: 1}}}
	ts2 := TraceStats{BufferStats: []BufferStats{{ChunksOverwritten: 9}}}
	add(AppendTraceStatsPacket(nil, &ts1, 0, 200))
	add(AppendTraceStatsPacket(nil, &ts2, 0, 300))
	full := len(file)
	file = append(file, 0x0a, 0x20, 0x01) // truncated record

	s, err := SummarizeOptions(bytes.NewReader(file), SummaryOptions{FirstN: 3})
	if err != nil {
		t.Fatal(err)
	}
	if s.Packets != 8 || !s.Truncated || s.PreviousPacketDropped != 1 || s.TraceStatsPackets != 2 || len(s.First) != 3 {
		t.Fatalf("summary %+v", s)
	}
	if s.MinTimestamp != 50 || s.MaxTimestamp != 300 {
		t.Fatalf("time range %d..%d", s.MinTimestamp, s.MaxTimestamp)
	}
	if s.LastTraceStats == nil || s.LastTraceStats.BufferStats[0].ChunksOverwritten != 9 {
		t.Fatalf("last stats %+v", s.LastTraceStats)
	}
	if len(s.Sequences) != 3 || s.Sequences[0].ID != 1 || s.Sequences[1].ID != 2 || s.Sequences[1].Packets != 5 ||
		s.Sequences[1].PreviousPacketDropped != 1 || s.Sequences[1].LossBits != 65 || s.Sequences[1].MinTimestamp != 100 || s.Sequences[1].MaxTimestamp != 104 {
		t.Fatalf("sequences %+v", s.Sequences)
	}
	if s.Kinds["track_event"] != 5 || s.Kinds["sys_stats"] != 1 || s.Kinds["trace_stats"] != 2 {
		t.Fatalf("kinds %v", s.Kinds)
	}
	if s.StreamBytes != int64(full)+2 { // the cut record's header was read, its payload refused
		t.Fatalf("stream bytes %d, want %d", s.StreamBytes, full+2)
	}
	var out bytes.Buffer
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"packets:", "TRUNCATED:", "SEQ", "PRESENT|OVERWRITE", "track_event", "DATA LOSS", "packet 2 at offset"} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect text lacks %q:\n%s", want, text)
		}
	}
	// A non-truncation error is returned with the partial summary.
	bad := append(AppendRecord(nil, []byte{0x40, 0x01}), 0x08, 0x01)
	s, err = Summarize(bytes.NewReader(bad))
	if err == nil || s == nil || s.Packets != 1 {
		t.Fatalf("malformed: %v %+v", err, s)
	}
}
