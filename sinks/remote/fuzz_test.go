package remote

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// FuzzCheckRecords: any batch either checks or fails; a checked one's
// packets cover it exactly.
func FuzzCheckRecords(f *testing.F) {
	f.Add([]byte{0x0a, 0x02, 0x40, 0x01, 0x0a, 0x00})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		packets, nbytes, err := CheckRecords(data)
		if err != nil {
			return
		}
		if nbytes > uint64(len(data)) || packets > len(data) {
			t.Fatalf("%d packets, %d bytes in %d", packets, nbytes, len(data))
		}
	})
}

// FuzzStoreState: a state file on disk is untrusted; opening a store over
// any content either works or fails with an error naming the file.
func FuzzStoreState(f *testing.F) {
	dir := f.TempDir()
	s, err := OpenStore(dir, true)
	if err != nil {
		f.Fatal(err)
	}
	st, err := s.Stream(Identity{Machine: 5, Hostname: "h"})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := st.Append(1, []byte{0x0a, 0x02, 0x50, 0x02}, 1, 2); err != nil {
		f.Fatal(err)
	}
	s.Close()
	seed, err := os.ReadFile(filepath.Join(dir, MergedName+".state"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("TPST\x01\x00\x00\x00\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, state []byte) {
		var tr traceOut
		tr.machines = map[uint64]uint32{}
		if err := tr.decodeState(state); err != nil {
			return
		}
		if tr.off < 0 {
			t.Fatalf("negative offset %d", tr.off)
		}
	})
}

// FuzzIsTraceStats holds the per-session files' cheap TraceStats scan to
// the full decode: a packet that decodes, with trace_stats as its
// payload, is found; one that does not decode never is.
func FuzzIsTraceStats(f *testing.F) {
	ts := tracefile.AppendTraceStatsMessage(nil, &tracefile.TraceStats{})
	good := protowire.AppendBytes(protowire.AppendTag(seqPacket(2), tracefile.FieldTraceStats, protowire.BytesType), ts)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(seqPacket(3))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, p []byte) {
		got := isTraceStats(p)
		info, err := tracefile.DecodePacket(p)
		if err != nil && got {
			t.Fatalf("isTraceStats found trace_stats in a packet that does not decode (%v)", err)
		}
		if err == nil && info.PayloadField == tracefile.FieldTraceStats && !got {
			t.Fatal("isTraceStats missed a TraceStats packet")
		}
	})
}
