package sinks

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// Rotate on demand: the closed file ends with a TraceStats, the next one
// starts self-contained (clock snapshot, restore of each sequence), and
// together they hold every packet once.
func TestFileSinkRotateOnDemand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.pftrace")
	s := newTestFile(t, FileOptions{Path: path, Rotatable: true}, fileHooks{})
	clock := tracefile.AppendClockSnapshot(tracefile.AppendServiceHeader(nil, 7), []tracefile.Clock{{ID: 6, Timestamp: 1}}, 6)
	interned := appendLenField(nil, 2, appendLenField(nil, 1, []byte("name")))
	first := appendLenField(appendVarint(tracefile.AppendTimestamp(nil, 1), tracefile.FieldSequenceFlags, 1), tracefile.FieldInternedData, interned)
	first = tracefile.AppendTrusted(first, tracefile.Trusted{UID: 1000, SequenceID: 2, PID: 42, HasPID: true})
	all := [][]byte{clock, first}
	for i := range 10 {
		all = append(all, mkPacket(2, uint64(i+2), tracefile.FieldTrackEvent, 50))
	}
	for i, p := range all {
		if err := s.Write(bg, [][]byte{p}); err != nil {
			t.Fatal(err)
		}
		if i == 6 {
			closed, err := s.Rotate()
			if err != nil || closed != path {
				t.Fatalf("Rotate = %q, %v", closed, err)
			}
		}
	}
	if err := s.Close(bg); err != nil {
		t.Fatal(err)
	}
	files := s.Files()
	if len(files) != 2 || s.Stats().FilesRotated != 1 {
		t.Fatalf("files %v, stats %+v", files, s.Stats())
	}
	second := mustRead(t, files[1])
	if !bytes.Equal(second[0], clock) {
		t.Fatal("the file after a rotation does not start with the clock snapshot")
	}
	if _, ok, _ := tracefile.DecodeTraceStatsPacket(mustRead(t, files[0])[len(mustRead(t, files[0]))-1]); !ok {
		t.Fatal("the rotated file does not end with a TraceStats")
	}
	samePackets(t, dataPackets(readAllFiles(t, files)), all)
	if _, err := s.Rotate(); err == nil {
		t.Fatal("Rotate after Close succeeded")
	}
	plain := newTestFile(t, FileOptions{Path: filepath.Join(t.TempDir(), "p.pftrace")}, fileHooks{})
	if _, err := plain.Rotate(); err == nil {
		t.Fatal("a sink opened without Rotatable rotated without its fold")
	}
	_ = plain.Close(bg)
}
