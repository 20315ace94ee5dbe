package relay

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"

	"github.com/tracepipe/tracepipe/sinks/remote"
)

// sendRange writes packets with timestamps [from, to) on sequences 2 and
// 3 alternately, flushing every flushEvery packets. With paced, it waits
// for room in the sink's queue before each write, as a producer slower
// than the network would; otherwise it writes as fast as it can and the
// queue bound decides what is dropped.
func sendRange(t testing.TB, s *Sink, from, to, flushEvery int, paced bool) {
	t.Helper()
	batch := make([][]byte, 0, 10)
	for n := from; n < to; n++ {
		if paced && len(batch) == 0 {
			testsupport.WaitUntil(t, "room in the queue", 20*time.Second, func() bool { return s.QueueDepth() < s.out.MaxBatches()-1 })
		}
		batch = append(batch, testPacket(2+uint32(n%2), uint64(n), 100))
		if len(batch) == cap(batch) || n == to-1 {
			s.Write(context.Background(), batch) // drops are checked by the caller through Stats
			batch = batch[:0]
		}
		if (n+1)%flushEvery == 0 {
			s.Flush(context.Background())
		}
	}
	s.Flush(context.Background())
}

func newSink(t testing.TB, addr, host string, batchBytes, maxBatches int) *Sink {
	t.Helper()
	s, err := New(Options{
		Address:    addr,
		Identity:   remote.Identity{Machine: remote.HashMachineID(host), Session: [16]byte{byte(len(host)), 1}, Hostname: host},
		BatchBytes: batchBytes, MaxBatches: maxBatches,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 100 * time.Millisecond, CloseTimeout: 20 * time.Second,
		Logger: testsupport.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkExactlyOnce asserts that ts holds 0..n-1 in order.
func checkExactlyOnce(t *testing.T, what string, ts []uint64, n int) {
	t.Helper()
	if len(ts) != n {
		t.Errorf("%s: %d packets, want %d", what, len(ts), n)
	}
	for i, v := range ts {
		if v != uint64(i) {
			t.Fatalf("%s: packet %d has timestamp %d, want %d (lost, duplicated or reordered)", what, i, v, i)
		}
	}
}

func TestTwoSendersExactlyOnce(t *testing.T) {
	for _, merge := range []bool{false, true} {
		name := "split"
		if merge {
			name = "merge"
		}
		t.Run(name, func(t *testing.T) {
			const n = 4000
			dir := t.TempDir()
			store, err := remote.OpenStore(dir, merge)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			addr := startServer(t, store, ServerOptions{Logger: testsupport.Logger(t)})
			a := newSink(t, addr, "alpha", 8<<10, 0)
			b := newSink(t, addr, "beta", 8<<10, 0)
			var wg sync.WaitGroup
			for _, s := range []*Sink{a, b} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sendRange(t, s, 0, n, 100, true)
				}()
			}
			wg.Wait()
			closeSink(t, a)
			closeSink(t, b)
			for _, s := range []*Sink{a, b} {
				if st := s.Stats(); st.PacketsWritten != n || st.PacketsDropped() != 0 {
					t.Errorf("%s: stats %+v, want %d written and nothing dropped", s.Identity().Hostname, st, n)
				}
			}
			if !merge {
				if files := traceFiles(t, dir); len(files) != 2 {
					t.Fatalf("files %v, want one per sender", files)
				}
				for _, s := range []*Sink{a, b} {
					var ts []uint64
					for i, p := range readPackets(t, store.FileName(s.Identity())) {
						if want := 2 + uint32(p.Timestamp%2); p.SequenceID != want {
							t.Fatalf("packet %d: sequence %d, want %d", i, p.SequenceID, want)
						}
						ts = append(ts, p.Timestamp)
					}
					checkExactlyOnce(t, s.Identity().Hostname, ts, n)
				}
				return
			}
			pkts := readPackets(t, store.FileName(a.Identity()))
			perMachine := map[uint32][]uint64{}
			owner := map[uint32]uint32{}     // remapped sequence id → machine
			origin := map[[2]uint32]uint32{} // (machine, original sequence) → remapped
			for i, p := range pkts {
				if p.MachineID == 0 {
					t.Fatalf("packet %d has no machine_id", i)
				}
				perMachine[p.MachineID] = append(perMachine[p.MachineID], p.Timestamp)
				if m, ok := owner[p.SequenceID]; ok && m != p.MachineID {
					t.Fatalf("packet %d: sequence id %d used by machines %d and %d", i, p.SequenceID, m, p.MachineID)
				}
				owner[p.SequenceID] = p.MachineID
				key := [2]uint32{p.MachineID, 2 + uint32(p.Timestamp%2)}
				if id, ok := origin[key]; ok && id != p.SequenceID {
					t.Fatalf("packet %d: one original sequence split into ids %d and %d", i, id, p.SequenceID)
				}
				origin[key] = p.SequenceID
			}
			if len(perMachine) != 2 {
				t.Fatalf("machine ids %v, want 2 distinct", len(perMachine))
			}
			if len(owner) != 4 {
				t.Errorf("%d distinct sequence ids, want 4 (2 per machine)", len(owner))
			}
			for m, ts := range perMachine {
				checkExactlyOnce(t, "machine "+itoa(int(m)), ts, n)
			}
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

// TestReceiverKilled runs two senders into a receiver process, kills it
// with SIGKILL mid-stream and restarts it on the same directory: with
// queues big enough for the outage nothing is lost and nothing duplicated;
// with small queues exactly the packets each sender counted as dropped
// are missing. In merge mode the senders keep distinct machine ids and
// sequence ids that never collide across the restart.
func TestReceiverKilled(t *testing.T) {
	for _, tc := range []struct {
		name              string
		batch, maxBatches int
		lossy, merge      bool
	}{
		{"within-bound", 4 << 10, 512, false, false},
		{"within-bound-merge", 4 << 10, 512, false, true},
		{"beyond-bound", 1 << 10, 4, true, false},
		{"beyond-bound-merge", 1 << 10, 4, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			addr := freeAddr(t)
			child := startChild(t, addr, dir, tc.merge)
			senders := []*Sink{
				newSink(t, addr, "gamma", tc.batch, tc.maxBatches),
				newSink(t, addr, "delta", tc.batch, tc.maxBatches),
			}
			// Sender k's packet n has timestamp k*base + n.
			const base = 1_000_000
			both := func(from, to int, paced bool) {
				var wg sync.WaitGroup
				for k, s := range senders {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sendRange(t, s, k*base+from, k*base+to, 20, paced)
					}()
				}
				wg.Wait()
			}
			both(0, 2000, true)
			for _, s := range senders {
				testsupport.WaitUntil(t, "some batches acknowledged", 20*time.Second, func() bool { return s.Stats().PacketsWritten > 500 })
			}
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			child.Wait()
			both(2000, 3000, false) // while the receiver is gone
			startChild(t, addr, dir, tc.merge)
			for _, s := range senders {
				closeSink(t, s)
			}

			store, err := remote.OpenStore(dir, tc.merge)
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			perSender := make([][]uint64, len(senders))
			machineOf := map[int]uint32{}
			seqOwner := map[uint32]int{}
			for k, s := range senders {
				if tc.merge && k > 0 {
					break // one file holds both
				}
				for _, p := range readPackets(t, store.FileName(s.Identity())) {
					from := int(p.Timestamp / base)
					if from >= len(senders) {
						t.Fatalf("packet with timestamp %d from no sender", p.Timestamp)
					}
					perSender[from] = append(perSender[from], p.Timestamp%base)
					if !tc.merge {
						continue
					}
					if m, ok := machineOf[from]; ok && m != p.MachineID || p.MachineID == 0 {
						t.Fatalf("sender %d: machine_id %d, earlier %d", from, p.MachineID, m)
					}
					machineOf[from] = p.MachineID
					if o, ok := seqOwner[p.SequenceID]; ok && o != from {
						t.Fatalf("sequence id %d used by senders %d and %d", p.SequenceID, o, from)
					}
					seqOwner[p.SequenceID] = from
				}
			}
			if tc.merge && machineOf[0] == machineOf[1] {
				t.Errorf("both senders have machine_id %d", machineOf[0])
			}
			for k, s := range senders {
				st, ts := s.Stats(), perSender[k]
				name := s.Identity().Hostname
				if !tc.lossy {
					checkExactlyOnce(t, name, ts, 3000)
					if st.PacketsWritten != 3000 || st.PacketsDropped() != 0 {
						t.Errorf("%s: stats %+v, want 3000 written, none dropped", name, st)
					}
					// A receiver restart that loses nothing is a
					// reconnect (info), not an error nor a failure.
					if st.Errors != 0 || st.Reconnects == 0 || s.Failed() != nil {
						t.Errorf("%s: stats %+v, failed %v: want a reconnect, no error", name, st, s.Failed())
					}
					continue
				}
				for i := 1; i < len(ts); i++ {
					if ts[i] <= ts[i-1] {
						t.Fatalf("%s: packet %d: timestamp %d after %d (duplicate or reorder)", name, i, ts[i], ts[i-1])
					}
				}
				// Dropped while the receiver was away: lost to the
				// outage (an error that fails the sink), not to a full
				// queue.
				if st.PacketsDroppedError == 0 || st.PacketsDroppedQueue != 0 || s.Failed() == nil {
					t.Errorf("%s: stats %+v, failed %v: want the outage's drops counted as lost to it", name, st, s.Failed())
				}
				if got := uint64(len(ts)) + st.PacketsDroppedError; got != 3000 || st.PacketsWritten != uint64(len(ts)) {
					t.Errorf("%s: %d stored + %d counted dropped = %d, want 3000; written %d", name, len(ts), st.PacketsDroppedError, got, st.PacketsWritten)
				}
			}
		})
	}
}

// A receiver at its connection limit refuses more senders; they retry
// and get in once a slot frees.
func TestServerConnectionLimit(t *testing.T) {
	store, err := remote.OpenStore(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	addr := startServer(t, store, ServerOptions{MaxConns: 1})
	a := newSink(t, addr, "first", 0, 0)
	testsupport.WaitUntil(t, "the first sender's session", 10*time.Second, func() bool { return a.Connects.Load() == 1 })
	b := newSink(t, addr, "second", 0, 0)
	sendRange(t, b, 0, 100, 10, false)
	testsupport.WaitUntil(t, "the second sender refused", 10*time.Second, func() bool { return b.Failures.Load() >= 2 })
	if b.Connects.Load() != 0 {
		t.Fatal("a sender got past the connection limit")
	}
	closeSink(t, a)
	closeSink(t, b) // its retries get the freed slot
	if st := b.Stats(); st.PacketsWritten != 100 {
		t.Errorf("second sender: stats %+v, want its 100 packets written after the first left", st)
	}
}
