package remote

import (
	"os"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/tracefile"
)

func record(p []byte) []byte { return tracefile.AppendRecord(nil, p) }

// A released per-session file is closed, and a later handle continues it
// from its state: duplicates are still suppressed and a torn tail cut.
func TestStoreReleaseAndReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := Identity{Machine: 3, Session: [16]byte{1}, Hostname: "h"}
	st, err := s.Stream(id)
	if err != nil {
		t.Fatal(err)
	}
	b1 := record([]byte{0x40, 0x01})
	if ok, err := st.Append(1, b1, 1, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	st.Release()
	if len(s.traces) != 0 {
		t.Fatalf("%d traces still open after the last handle was released", len(s.traces))
	}
	// A crash after a write but before its state: garbage past the valid end.
	f, err := os.OpenFile(s.FileName(id), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0x0a, 0x05, 0x40})
	f.Close()
	st, err = s.Stream(id)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	if st.LastSeq() != 1 {
		t.Fatalf("last batch %d after reopening, want 1", st.LastSeq())
	}
	if ok, _ := st.Append(1, b1, 1, 2); ok {
		t.Fatal("batch 1 stored twice")
	}
	b2 := record([]byte{0x40, 0x02})
	if ok, err := st.Append(2, b2, 1, 2); !ok || err != nil {
		t.Fatal(ok, err)
	}
	pkts := tracetest.ReadAll(t, s.FileName(id))
	if len(pkts) != 2 || string(pkts[0]) != string(b1[2:]) || string(pkts[1]) != string(b2[2:]) {
		t.Fatalf("file holds %x, want batch 1 then batch 2", pkts)
	}
}

// machinePackets leaves out of a merged file's packets those the
// receiver wrote for clock alignment (its host packets, no machine_id; a
// machine's remote_clock_sync and marker packets, no sequence id).
func machinePackets(t *testing.T, pkts [][]byte) [][]byte {
	t.Helper()
	var out [][]byte
	for _, p := range pkts {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatal(err)
		}
		if info.MachineID != 0 && info.SequenceID != 0 {
			out = append(out, p)
		}
	}
	return out
}

func receiverSection(t *testing.T, p []byte) *tracefile.ReceiverStats {
	t.Helper()
	ts, ok, err := tracefile.DecodeTraceStatsPacket(p)
	if err != nil || !ok || ts.Tracepipe == nil || ts.Tracepipe.Receiver == nil {
		t.Fatalf("packet %x is no receiver TraceStats (%v)", p, err)
	}
	return ts.Tracepipe.Receiver
}
