package perfettosvc

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/smb"

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
	// The charge is the session's HeapBudget, taken before Run (which
	// adds producers HeapBudget reads).
	fileBudget := file.(*consumerSession).heap.n
	if fileBudget <= pipeline.HeapBase {
		t.Fatalf("a session charged %d bytes, not its pipeline heap budget", fileBudget)
	}
	if got := rec.last(); got != serveHeapBase+fileBudget || got != pc.HeapLimit() {
		t.Fatalf("limit %d with a streaming session, want base + its budget %d", got, serveHeapBase+fileBudget)
	}
	// A second session, read with ReadBuffers: its budget and its queue.
	read, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 2}, traceConfig(60_000, false, "tracepipe.synthetic"), -1)
	if err != nil {
		t.Fatal(err)
	}
	rs := read.(*consumerSession)
	readBudget, queue := rs.heap.n, int64(rs.mem.limit)
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

// liveHeap collects and returns the live Go heap (runtime/metrics).
func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Regression guard for issue 27: a streaming session (write_into_file,
// file_write_period_ms 100) fed by a producer writing as fast as it can
// keeps its large allocations off the Go heap: the live heap grows by no
// more than what its heap budget counts for its configuration (the
// budget less the allowance every session gets; 2.5 MiB here, for the
// output batches' index), where output batches on the heap took 5 MiB.
func TestStreamingSessionLiveHeapBound(t *testing.T) {
	pc := &PerfettoConsumers{Producers: perfetto.NewProducers(), Logger: testsupport.Logger(t)}
	prodSock, consSock := perfettoServiceFor(t, pc)
	pd := dialDouble(t, prodSock, 0)
	defer pd.close()
	fd := &fullSpeedDouble{pd: pd, policy: smb.Drop, stop: make(chan struct{}), wrote: make(chan smb.WriterStats, 1)}
	pd.connect("go-fullspeed", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"),
		WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
	served := make(chan error, 1)
	go fd.serve(served)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if missing := pc.Producers.WaitFor(ctx, []string{"test.perfetto_double"}); len(missing) > 0 {
		t.Fatal(missing)
	}
	base := liveHeap()
	f, err := os.Create(filepath.Join(t.TempDir(), "out.pftrace"))
	if err != nil {
		t.Fatal(err)
	}
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	enable := c.invokeFD("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: fullSpeedStreamingConfig(16<<10, 2000, "test.perfetto_double")}, int(f.Fd()))
	f.Close()
	var budget int64
	testsupport.WaitUntil(t, "the session", 30*time.Second, func() bool {
		pc.mu.Lock()
		defer pc.mu.Unlock()
		for _, cs := range pc.sessions {
			budget = cs.heap.n // its HeapBudget, taken before Run (it reads the producers Run adds)
		}
		return budget > 0
	})
	var peak uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-fd.stop: // the data source was stopped: the session is ending
				return
			case <-tick.C:
				peak = max(peak, liveHeap())
			}
		}
	}()
	var er ipc.EnableTracingResponse
	if r := c.reply(enable); proto.Unmarshal(r.GetReplyProto(), &er) != nil || !er.GetDisabled() || er.Error != nil {
		t.Fatalf("EnableTracing reply %v", &er)
	}
	<-done
	pd.close()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	grew, bound := int64(peak)-int64(base), budget-pipeline.HeapBase
	t.Logf("live heap %.1f MiB before the session, peak %.1f MiB while it streamed (%d flushes); session heap budget %.1f MiB",
		float64(base)/(1<<20), float64(peak)/(1<<20), fd.flushes, float64(budget)/(1<<20))
	if fd.flushes < 5 {
		t.Fatalf("%d flushes: the session did not stream through its periods", fd.flushes)
	}
	if grew > bound {
		t.Fatalf("the live heap grew by %.1f MiB while streaming, over the %.1f MiB its configuration accounts for", float64(grew)/(1<<20), float64(bound)/(1<<20))
	}
}
