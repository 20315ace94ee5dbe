package tracefile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// TestPacketSelector: by data source a sequence is selected from its first
// packet carrying the payload field on (never before), by "field:N" as by
// name, an unknown name selects nothing; --sequence wins over the data
// source; a filter's false rejects, its error does not.
func TestPacketSelector(t *testing.T) {
	pkt := func(seq uint32, payload int32) *PacketInfo {
		return &PacketInfo{SequenceID: seq, PayloadField: payload}
	}
	stream := []*PacketInfo{
		pkt(1, FieldForTesting), // before seq 1 shows track_event: not selected
		pkt(2, FieldTrackEvent),
		pkt(1, FieldTrackEvent),
		pkt(1, FieldForTesting), // seq 1 now belongs to track_event
		pkt(3, FieldForTesting),
		pkt(2, 0),
	}
	run := func(s *PacketSelector) []bool {
		var got []bool
		for _, p := range stream {
			got = append(got, s.Accept(p))
		}
		return got
	}
	for _, c := range []struct {
		name string
		sel  PacketSelector
		want []bool
	}{
		{"all", PacketSelector{}, []bool{true, true, true, true, true, true}},
		{"track_event", PacketSelector{DataSource: "track_event"}, []bool{false, true, true, true, false, true}},
		{"field:11", PacketSelector{DataSource: "field:11"}, []bool{false, true, true, true, false, true}},
		{"for_testing", PacketSelector{DataSource: "for_testing"}, []bool{true, false, true, true, true, false}},
		{"unknown", PacketSelector{DataSource: "no_such_source"}, []bool{false, false, false, false, false, false}},
		{"bad field", PacketSelector{DataSource: "field:x"}, []bool{false, false, false, false, false, false}},
		{"sequence", PacketSelector{DataSource: "track_event", BySequence: true, Sequence: 3}, []bool{false, false, false, false, true, false}},
		{"sequence 0", PacketSelector{BySequence: true}, []bool{false, false, false, false, false, false}},
		{"filter", PacketSelector{Filter: func(p *PacketInfo) (bool, error) { return p.SequenceID != 2, nil }}, []bool{true, false, true, true, true, false}},
		{"filter error", PacketSelector{Filter: func(*PacketInfo) (bool, error) { return false, errors.New("no field") }}, []bool{true, true, true, true, true, true}},
	} {
		if got := run(&c.sel); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// TestReadFilePackets: each decodable record reaches fn with its info, an
// undecodable one is skipped and counted, and a truncated tail is reported
// through onTruncated with the whole records before it.
func TestReadFilePackets(t *testing.T) {
	good := protowire.AppendVarint(protowire.AppendTag(nil, FieldTrustedSequenceID, protowire.VarintType), 7)
	bad := []byte{0x00} // field number 0: not a TracePacket
	b := AppendRecord(nil, good)
	b = AppendRecord(b, bad)
	b = AppendRecord(b, good)
	whole := len(b)
	b = AppendRecord(b, good)
	path := filepath.Join(t.TempDir(), "t.pftrace")
	if err := os.WriteFile(path, b[:whole+2], 0o644); err != nil {
		t.Fatal(err)
	}
	var seqs []uint32
	truncated := -1
	n, err := ReadFilePackets(path, ReaderOptions{}, func(records int, err error) {
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("onTruncated with %v", err)
		}
		truncated = records
	}, func(_ Record, info *PacketInfo) error {
		seqs = append(seqs, info.SequenceID)
		return nil
	})
	if err != nil || n != 1 || truncated != 3 || !reflect.DeepEqual(seqs, []uint32{7, 7}) {
		t.Errorf("ReadFilePackets: %d undecodable, err %v, truncated after %d records, sequences %v; want 1, nil, 3, [7 7]", n, err, truncated, seqs)
	}

	stop := errors.New("stop")
	if _, err := ReadFilePackets(path, ReaderOptions{}, nil, func(Record, *PacketInfo) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("fn's error: got %v", err)
	}
}
