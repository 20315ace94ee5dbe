package perfettosvc

import (
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/transport/perfetto"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// Consumer sessions share one bound (any local user may connect to the
// consumer socket): a session that would take the running ones over it is
// refused, naming the figures, and what a session reserved is given back
// when it ends.
func TestPerfettoConsumersMemoryBound(t *testing.T) {
	// traceConfig: one 4 MiB buffer, a built-in source (256 KiB SMB) and,
	// read with ReadBuffers, a read queue of 2 × 4 MiB + 1 MiB: 13.25 MiB.
	pc := &PerfettoConsumers{Producers: perfetto.NewProducers(), Logger: testsupport.Logger(t), MaxMemory: 20 << 20}
	deferred := func() []byte {
		tc := traceConfig(60_000, false, "tracepipe.synthetic")
		tc = protowire.AppendTag(tc, 12, protowire.VarintType) // deferred_start
		return protowire.AppendVarint(tc, 1)
	}
	first, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 1}, deferred(), -1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pc.EnableTracing(ipc.Peer{UID: 1000, PID: 2}, deferred(), -1)
	if err == nil {
		t.Fatal("a second 13.25 MiB session was enabled under a 20 MiB bound")
	}
	for _, want := range []string{"13.2 MiB", "running sessions hold 13.2 MiB", "20.0 MiB", "--max-consumer-memory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	first.Disable()
	<-first.Done()
	second, err := pc.EnableTracing(ipc.Peer{UID: 1000, PID: 2}, deferred(), -1)
	if err != nil {
		t.Fatalf("after the first session ended: %v", err)
	}
	second.Disable()
	<-second.Done()
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.memInUse != 0 {
		t.Errorf("%d bytes still reserved after every session ended", pc.memInUse)
	}
}
