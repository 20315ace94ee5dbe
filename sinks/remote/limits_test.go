package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// seqPacket is a packet on sequence seq.
func seqPacket(seq uint32) []byte {
	return tracefile.AppendTrusted(tracefile.AppendTimestamp(nil, 1), tracefile.Trusted{UID: 1, SequenceID: seq})
}

func batchOf(ids ...uint32) (data []byte, packets int, nbytes uint64) {
	for _, id := range ids {
		p := seqPacket(id)
		data = tracefile.AppendRecord(data, p)
		packets++
		nbytes += uint64(len(p))
	}
	return data, packets, nbytes
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// Hellos alone (streams opened and released without a batch) leave no
// file, merged or not, and nothing in a merged file's state.
func TestStoreNoFilesWithoutBatch(t *testing.T) {
	for _, merge := range []bool{false, true} {
		dir := t.TempDir()
		s, err := OpenStore(dir, merge)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			st, err := s.Stream(Identity{Machine: 7, Session: [16]byte{byte(i), 1}, Hostname: "h"})
			if err != nil {
				t.Fatal(err)
			}
			st.Release()
		}
		if names := dirNames(t, dir); len(names) != 0 {
			t.Fatalf("merge=%v: 100 hellos left %v", merge, names)
		}
		s.Close()
	}
}

// The merged file's sequence remap is capped per stream: the batch that
// passes the cap is refused and counted, leaves nothing in the file, and
// the stream goes on with the ids it had.
func TestStoreSequenceCap(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStoreOptions(dir, StoreOptions{Merge: true, MaxSequences: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream(Identity{Machine: 9, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	d, n, b := batchOf(1, 2, 3)
	if ok, err := st.Append(1, d, n, b); !ok || err != nil {
		t.Fatal(ok, err)
	}
	d, n, b = batchOf(1, 4, 5, 6)
	if _, err := st.Append(2, d, n, b); !errors.Is(err, ErrTooManySequences) || !errors.Is(err, ErrRefused) {
		t.Fatalf("batch with 6 ids under a cap of 4: %v", err)
	}
	if got := s.Stats.RefusedSequences.Load(); got != 1 {
		t.Fatalf("refusals counted %d, want 1", got)
	}
	d, n, b = batchOf(3, 4, 1)
	if ok, err := st.Append(2, d, n, b); !ok || err != nil {
		t.Fatalf("a batch within the cap after a refusal: %v %v", ok, err)
	}
	pkts := machinePackets(t, tracetest.ReadAll(t, filepath.Join(dir, MergedName)))
	if len(pkts) != 7 {
		t.Fatalf("%d packets in the merged file, want 6 and a receiver packet", len(pkts))
	}
	if r := receiverSection(t, pkts[6]); r.BatchesRefused != 1 || r.PacketsStored != 7 || r.Machine != 9 {
		t.Fatalf("receiver section %+v", r)
	}
	seen := map[uint32]bool{}
	for _, p := range pkts[:6] {
		info, _ := tracefile.DecodePacket(p)
		seen[info.SequenceID] = true
	}
	if len(seen) != 4 {
		t.Fatalf("remapped ids %v, want 4 distinct", seen)
	}
}

// A batch numbered far beyond the last one is refused and does not move
// the stream: the next batch in order is stored (a 2^64-1 batch used to
// turn every later batch into a "duplicate").
func TestStoreSeqWindow(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStoreOptions(dir, StoreOptions{SeqWindow: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream(Identity{Machine: 9, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	d, n, b := batchOf(1)
	if _, err := st.Append(1<<64-1, d, n, b); !errors.Is(err, ErrSeqWindow) {
		t.Fatalf("batch 2^64-1: %v", err)
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("a refused batch left %v", names)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if ok, err := st.Append(seq, d, n, b); !ok || err != nil {
			t.Fatalf("batch %d after the refusal: %v %v", seq, ok, err)
		}
	}
	if s.Stats.RefusedWindow.Load() != 1 || s.Stats.Duplicates.Load() != 0 {
		t.Fatalf("refused %d, duplicates %d", s.Stats.RefusedWindow.Load(), s.Stats.Duplicates.Load())
	}
}

// A gap in the batch numbers is written into the file at once as a
// receiver packet naming the missing batches.
func TestStoreGapWritten(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	id := Identity{Machine: 9, Hostname: "h"}
	st, err := s.Stream(id)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	d, n, b := batchOf(1)
	for _, seq := range []uint64{1, 5} {
		if ok, err := st.Append(seq, d, n, b); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	pkts := tracetest.ReadAll(t, s.FileName(id))
	if len(pkts) != 3 {
		t.Fatalf("%d packets, want batch 1, batch 5 and the receiver packet", len(pkts))
	}
	r := receiverSection(t, pkts[2])
	if r.BatchesMissing != 3 || r.Gaps != 1 || r.PacketsStored != 3 || r.GapText() != "batches 2-4" {
		t.Fatalf("receiver section %+v (%s)", r, r.GapText())
	}
	rows := tracefile.LossReport(tracefile.TraceStats{Tracepipe: &tracefile.TracepipeStats{Receiver: r}})
	if !tracefile.HasDataLoss(rows) {
		t.Fatal("the loss report does not count missing batches as loss")
	}
}

// A machine may attach at most MaxSessionsPerMachine sessions at once;
// releasing one makes room.
func TestStoreSessionsPerMachine(t *testing.T) {
	s, err := OpenStoreOptions(t.TempDir(), StoreOptions{MaxSessionsPerMachine: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var held []*Stream
	for i := range 2 {
		st, err := s.Stream(Identity{Machine: 4, Session: [16]byte{byte(i)}})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, st)
	}
	// The same session again (a reconnect) is not a new session.
	again, err := s.Stream(Identity{Machine: 4, Session: [16]byte{0}})
	if err != nil {
		t.Fatalf("a second handle on an attached session: %v", err)
	}
	again.Release()
	if _, err := s.Stream(Identity{Machine: 4, Session: [16]byte{9}}); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("third session: %v", err)
	}
	if _, err := s.Stream(Identity{Machine: 5, Session: [16]byte{9}}); err != nil {
		t.Fatalf("another machine: %v", err)
	}
	held[0].Release()
	st, err := s.Stream(Identity{Machine: 4, Session: [16]byte{9}})
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	st.Release()
	if s.Stats.RefusedSessions.Load() != 1 {
		t.Fatalf("refused %d", s.Stats.RefusedSessions.Load())
	}
}

// With a disk budget, batches that would pass it are refused and counted.
func TestStoreDiskBudget(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStoreOptions(dir, StoreOptions{DiskBudget: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stream(Identity{Machine: 4, Hostname: "h"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Release()
	data := tracefile.AppendRecord(nil, wire.AppendBytes(seqPacket(1), tracefile.FieldForTesting, make([]byte, 8<<10)))
	var refused error
	for seq := uint64(1); seq <= 20 && refused == nil; seq++ {
		_, refused = st.Append(seq, data, 1, uint64(len(data)))
	}
	if !errors.Is(refused, ErrDiskBudget) || !strings.Contains(refused.Error(), "budget") {
		t.Fatalf("20 batches of 8 KiB under a 64 KiB budget: %v", refused)
	}
	var total int64
	for _, n := range dirNames(t, dir) {
		fi, _ := os.Stat(filepath.Join(dir, n))
		total += fi.Size()
	}
	if total > 64<<10 {
		t.Fatalf("the directory holds %d bytes, over the budget", total)
	}
}

// A per-session file stores packets as they came, even ones that do not
// parse as TracePackets (only the framing is the receiver's business);
// the merged file, which rewrites each packet, refuses them.
func TestStoreUnparsablePackets(t *testing.T) {
	bad := tracefile.AppendRecord(nil, []byte{0x00, 0x01}) // field number 0
	for _, merge := range []bool{false, true} {
		s, err := OpenStore(t.TempDir(), merge)
		if err != nil {
			t.Fatal(err)
		}
		st, err := s.Stream(Identity{Machine: 3, Hostname: "h"})
		if err != nil {
			t.Fatal(err)
		}
		ok, err := st.Append(1, bad, 1, 2)
		if merge && (ok || !errors.Is(err, ErrBadBatch)) {
			t.Fatalf("merged: %v %v, want ErrBadBatch", ok, err)
		}
		if !merge && (!ok || err != nil) {
			t.Fatalf("per session: %v %v, want stored", ok, err)
		}
		st.Release()
		s.Close()
	}
}

// A stream whose file is busy (its lock held, as by a slow write) stalls
// only itself: a reconnect of it waits, and meanwhile another session
// attaches and stores. (Store.Stream used to wait for the busy file's lock
// while holding the store-wide lock.)
func TestStoreBusyStreamStallsNoOther(t *testing.T) {
	s, err := OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a := Identity{Machine: 1, Session: [16]byte{1}, Hostname: "a"}
	sa, err := s.Stream(a)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Release()
	sa.t.mu.Lock() // a's file busy
	again := make(chan *Stream, 1)
	go func() {
		st, err := s.Stream(a) // waits for a's file
		if err != nil {
			t.Error(err)
		}
		again <- st
	}()
	// Let the reconnect reach the busy file's lock first.
	attached := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.attached[keyOf(a)] >= 2
	}
	if !testsupport.WaitFor(10*time.Second, attached) {
		sa.t.mu.Unlock()
		t.Fatal("the reconnect never attached")
	}
	done := make(chan error, 1)
	go func() {
		sb, err := s.Stream(Identity{Machine: 2, Session: [16]byte{2}, Hostname: "b"})
		if err == nil {
			d, n, b := batchOf(2)
			_, err = sb.Append(1, d, n, b)
			sb.Release()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		sa.t.mu.Unlock()
		t.Fatal("another session could not attach while a's file was busy")
	}
	sa.t.mu.Unlock()
	if st := <-again; st != nil {
		st.Release()
	}
}
