package pipeline

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// unreachable is a network-like sink whose destination never answers: it
// loses every packet to its outage and reports the failure on its own
// (sinks.Failer), as the relay and nats sinks do.
type unreachable struct {
	mu sync.Mutex
	st sinks.SinkStats
}

var errUnreachable = errors.New("connection refused")

func (u *unreachable) Write(_ context.Context, p [][]byte) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.st.PacketsDroppedError += uint64(len(p))
	return nil
}
func (u *unreachable) WriteLast(p []byte) error    { return u.Write(context.Background(), [][]byte{p}) }
func (u *unreachable) Flush(context.Context) error { return nil }
func (u *unreachable) Close(context.Context) error { return nil }
func (u *unreachable) Stats() sinks.SinkStats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.st
}
func (u *unreachable) Failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.st.PacketsDroppedError == 0 {
		return nil
	}
	return errUnreachable
}
func (u *unreachable) Outage() error { return errUnreachable }

type unreachableBuilder struct{}

func (unreachableBuilder) Destination() string                { return "test://nowhere" }
func (unreachableBuilder) Open(sinks.Env) (sinks.Sink, error) { return &unreachable{}, nil }

func init() {
	sinks.Register("test.unreachable", func(m map[string]any) (sinks.Builder, error) {
		return unreachableBuilder{}, sinks.NewSection(m).Err()
	})
}

// A network sink that cannot deliver: with on_error drop the session
// runs to its end, with stop it ends early; either way the sink's result
// carries the cause, the status names the outage, and the file sink's
// final TraceStats lists the failed sink (index, destination, loss), so
// the local file reports the remote copy's loss.
func TestNetworkSinkFailureReachesOtherSinks(t *testing.T) {
	for _, policy := range []string{"drop", "stop"} {
		t.Run(policy, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.pftrace")
			cfg := cfgtest.LoadYAML(t, `
duration: 1m
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 4096}]
producers: {smb_size_kb: 4096}
data_sources:
  - name: test.scripted
    buffer_exhausted_policy: stall
    config: {writers: 2, packets: 3000, sizes: [200]}
sinks:
  - type: file
    file: {path: `+path+`}
  - type: test.unreachable
    on_error: `+policy+`
    test.unreachable: {}
`)
			s, err := New(cfg, Options{Logger: testsupport.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := s.Run(ctx)
			if res == nil {
				t.Fatal(err)
			}
			if stopped := err != nil && strings.Contains(err.Error(), "on_error: stop"); stopped != (policy == "stop") {
				t.Errorf("on_error %s: Run returned %v", policy, err)
			}
			if r := res.Sinks[1]; !errors.Is(r.Err, errUnreachable) {
				t.Errorf("sinks[1] result error %v, want the cause", r.Err)
			}
			if o := s.Status().SinkOutages; len(o) != 1 || o[0] != "sinks[1]: connection refused" {
				t.Errorf("status outages %q", o)
			}
			ts := lastStats(t, tracetest.ReadTrace(t, path))
			var peer *tracefile.PeerSinkStats
			for i := range ts.Tracepipe.PeerSinks {
				if ts.Tracepipe.PeerSinks[i].Index == 1 {
					peer = &ts.Tracepipe.PeerSinks[i]
				}
			}
			if peer == nil || peer.Failed != 1 || peer.Destination != "test://nowhere" || peer.Error != "connection refused" ||
				peer.PacketsDropped != res.Sinks[1].Stats.PacketsDroppedError {
				t.Fatalf("file's peer_sinks %+v; sinks[1] dropped %d", ts.Tracepipe.PeerSinks, res.Sinks[1].Stats.PacketsDroppedError)
			}
			if ts.Tracepipe.SinkPacketsDropped != 0 || !tracefile.HasDataLoss(tracefile.LossReport(ts)) {
				t.Errorf("the file's own counters %+v; its loss report must flag the remote copy", ts.Tracepipe)
			}
		})
	}
}
