package perfettosvc

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// limitRecorder keeps the limits SetHeapLimit was told, in order.
type limitRecorder struct {
	mu     sync.Mutex
	limits []int64
}

func (r *limitRecorder) set(n int64) {
	r.mu.Lock()
	r.limits = append(r.limits, n)
	r.mu.Unlock()
}

func (r *limitRecorder) last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.limits) == 0 {
		return 0
	}
	return r.limits[len(r.limits)-1]
}

// The soft memory limit follows the consumer sessions: each session
// running adds its pipeline heap budget, a session read with ReadBuffers
// its read queue too, which stays charged after the session ended until
// the consumer read it out; with every session gone the limit is the
// server's base again.
func TestHeapLimitFollowsSessions(t *testing.T) {
	rec := &limitRecorder{}
	pc := &PerfettoConsumers{Producers: perfetto.NewProducers(), Logger: testsupport.Logger(t), SetHeapLimit: rec.set}
	if got := pc.HeapLimit(); got != serveHeapBase {
		t.Fatalf("limit with no session %d, want the base %d", got, serveHeapBase)
	}
	// A streaming session (write_into_file): its pipeline budget only.
	f, err := os.Create(filepath.Join(t.TempDir(), "out.pftrace"))
	if err != nil {
		t.Fatal(err)
	}
	fd, err := dupForEnable(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	file, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 1}, traceConfig(60_000, true, "tracepipe.synthetic"), fd)
	if err != nil {
		t.Fatal(err)
	}
	fileBudget := file.(*consumerSession).svc.HeapBudget()
	if got := rec.last(); got != serveHeapBase+fileBudget || got != pc.HeapLimit() {
		t.Fatalf("limit %d with a streaming session, want base + its budget %d", got, serveHeapBase+fileBudget)
	}
	// A second session, read with ReadBuffers: its budget and its queue.
	read, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 2}, traceConfig(60_000, false, "tracepipe.synthetic"), -1)
	if err != nil {
		t.Fatal(err)
	}
	rs := read.(*consumerSession)
	readBudget, queue := rs.svc.HeapBudget(), int64(rs.mem.limit)
	if got := rec.last(); got != serveHeapBase+fileBudget+readBudget+queue {
		t.Fatalf("limit %d with two sessions, want %d", got, serveHeapBase+fileBudget+readBudget+queue)
	}
	file.Disable()
	<-file.Done()
	if got := rec.last(); got != serveHeapBase+readBudget+queue {
		t.Fatalf("limit %d after the streaming session ended, want %d", got, serveHeapBase+readBudget+queue)
	}
	read.Disable()
	<-read.Done()
	if got := rec.last(); got != serveHeapBase+queue {
		t.Fatalf("limit %d after the read session ended with its queue unread, want base + queue %d", got, serveHeapBase+queue)
	}
	for len(read.ReadPackets(1<<20)) > 0 { // the session ended: the queue only shrinks
	}
	if got := rec.last(); got != serveHeapBase {
		t.Fatalf("limit %d once the queue was read out, want the base %d", got, serveHeapBase)
	}
}
