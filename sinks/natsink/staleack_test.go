package natsink

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

// An acknowledgement of batches sealed before some queue drops, read
// only after them, says nothing about those drops: JetStream may have
// sent it just before it died. They stay unclassified until JetStream
// acknowledges a batch sealed after them (a slow server: queue drops) or
// an outage begins (lost to the outage, which fails the sink). The
// server is stopped (SIGSTOP) while the queue fills, so that its acks
// of the queued batches come only after the drops.
func TestNATSStaleAckDoesNotExcuseDrops(t *testing.T) {
	for _, dies := range []bool{true, false} {
		name := "server-dies"
		if !dies {
			name = "server-acks-later-batch"
		}
		t.Run(name, func(t *testing.T) {
			srv := startNATS(t)
			s, err := New(Options{
				URL: srv.URL(), Subject: "traces.s", CreateStream: true, Stream: "S",
				Identity:   remote.Identity{Machine: 80, Session: [16]byte{8}, Hostname: "stale"},
				BatchBytes: 4 << 10, MaxBatches: 2, AckTimeout: 20 * time.Second, CloseTimeout: 30 * time.Second,
				BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, Logger: testsupport.Logger(t),
			})
			if err != nil {
				t.Fatal(err)
			}
			writeFlush(s, 0, 10)
			testsupport.WaitUntil(t, "the first batch acknowledged", 30*time.Second, func() bool { return s.Stats().PacketsWritten == 10 })
			if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// The signal is asynchronous: wait until every thread stopped.
			testsupport.WaitUntil(t, "nats-server stopped", 30*time.Second, func() bool { return allStopped(t, srv.cmd.Process.Pid) })
			// Two sealed batches fill the queue; the rest is dropped. No
			// batch is open: one sealed after the drops and acknowledged
			// would rightly excuse them.
			writeFlush(s, 10, 25)
			writeFlush(s, 25, 40)
			writeFlush(s, 40, 200)
			dropped := s.out.Stats().PacketsDroppedQueue
			if dropped != 160 || s.QueueDepth() != 2 {
				t.Fatalf("outbox %+v, %d batches queued: want a full queue of 2 and 160 drops", s.out.Stats(), s.QueueDepth())
			}
			if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			testsupport.WaitUntil(t, "the queued batches acknowledged", 30*time.Second, func() bool { return s.QueueDepth() == 0 })
			if !dies {
				acked := s.out.Acked()
				writeFlush(s, 200, 210) // a batch sealed after the drops
				testsupport.WaitUntil(t, "the later batch acknowledged", 30*time.Second, func() bool { return s.out.Acked() > acked })
			}
			srv.kill()
			testsupport.WaitUntil(t, "the outage noticed", 30*time.Second, s.link.IsDown)
			if dies { // the link records the failure just after the outage
				testsupport.WaitUntil(t, "the sink failed", 30*time.Second, func() bool { return s.Failed() != nil })
			}
			st := s.Stats()
			if dies && (st.PacketsDroppedQueue != 0 || st.PacketsDroppedError != dropped || s.Failed() == nil) {
				t.Errorf("stats %+v, failed %v: want the %d drops lost to the outage, the sink failed", st, s.Failed(), dropped)
			}
			if !dies && (st.PacketsDroppedQueue != dropped || st.PacketsDroppedError != 0 || s.Failed() != nil) {
				t.Errorf("stats %+v, failed %v: want %d drops of a slow server, no failure", st, s.Failed(), dropped)
			}
			s.cancel() // the server is gone: do not wait CloseTimeout for it
			_ = s.Close(bg)
		})
	}
}

// writeFlush writes packets [from, to) to s, then seals the open batch.
func writeFlush(s *Sink, from, to int) {
	for n := from; n < to; n++ {
		_ = s.Write(bg, [][]byte{testPacket(2, uint64(n), 200)})
	}
	_ = s.Flush(bg)
}

// allStopped reports whether every thread of process pid is stopped.
func allStopped(t *testing.T, pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false // a thread that ended: look again
		}
		// The state follows the parenthesised command name.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' && b[i+2] != 't' {
			return false
		}
	}
	return true
}
