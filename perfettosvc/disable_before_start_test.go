package perfettosvc

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// A deferred_start session disabled before StartTracing never starts its
// data sources (traced finishes a CONFIGURED session at once): the
// producer is never sent StartDataSource, and the session still ends
// (EnableTracing answered) and is forgotten.
func TestPerfettoDeferredSessionDisabledBeforeStartNeverStarts(t *testing.T) {
	prodSock, consSock, reg := perfettoService(t)
	pd := liveDouble(t, prodSock, reg, 20, false)
	c := dialConsumer(t, consSock)
	defer c.pd.close()
	tc := traceConfig(60_000, false, "test.perfetto_double")
	tc = protowire.AppendTag(tc, 12, protowire.VarintType) // deferred_start
	tc = protowire.AppendVarint(tc, 1)
	enable := c.pd.invoke("EnableTracing", &ipc.EnableTracingRequest{TraceConfig: tc}, false)
	if r := c.reply(c.pd.invoke("DisableTracing", &ipc.DisableTracingRequest{}, false)); !r.GetSuccess() {
		t.Fatalf("DisableTracing: %v", r)
	}
	if r := c.reply(enable); !r.GetSuccess() {
		t.Fatalf("EnableTracing reply %v", r)
	}
	// EnableTracing is answered once the session's Run returned: every
	// command the session would send its producer was sent by then.
	if n := pd.count("start_data_source"); n != 0 {
		pd.mu.Lock()
		defer pd.mu.Unlock()
		t.Fatalf("the producer was sent %d StartDataSource (commands %q); a session disabled before StartTracing starts nothing", n, pd.commands)
	}
	// StartTracing after Disable is refused.
	if r := c.reply(c.pd.invoke("StartTracing", &ipc.StartTracingRequest{}, false)); r.GetSuccess() {
		t.Fatalf("StartTracing after DisableTracing: %v", r)
	}
}
