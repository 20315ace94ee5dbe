package perfettosvc

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/pipeline"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/cfgtest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/plugins"
)

// A Perfetto producer's Flush command carries the flags: TRACE_CLONE for
// a snapshot's flush, TRACE_STOP for the session's last, both initiated
// by the service (TRACED), as traced sends them.
func TestFlushReasonReachesPerfettoProducer(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "producer.sock")
	reg := perfetto.NewProducers()
	host := ipc.NewHost(ipc.NewProducerPort(reg))
	host.Logf = t.Logf
	if err := host.Listen(sock); err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	pd := dialDouble(t, sock, 100)
	defer pd.close()
	pd.connect("go-double", &ipc.DataSourceDescriptor{Name: proto.String("test.perfetto_double"),
		WillNotifyOnStart: proto.Bool(true), WillNotifyOnStop: proto.Bool(true)})
	served := make(chan error, 1)
	go pd.serve(served)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if missing := reg.WaitFor(ctx, []string{"test.perfetto_double"}); len(missing) > 0 {
		t.Fatalf("never registered: %v", missing)
	}
	cfg := cfgtest.LoadYAML(t, fmt.Sprintf(`
duration: 60s
buffers: [{size_kb: 1024}]
perfetto: {enabled: true}
data_sources:
  - name: test.perfetto_double
sinks: [{type: file, path: %q}]
`, filepath.Join(dir, "live.pftrace")))
	s, err := pipeline.New(cfg, pipeline.Options{Logger: testsupport.Logger(t), Perfetto: reg})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := s.Run(runCtx); done <- err }()
	// The snapshot's flush goes to running data sources: wait until the
	// session itself counts this one started (the producer having seen
	// start_data_source is not enough: its NotifyDataSourceStarted may
	// still be on its way, and a snapshot then flushes nobody).
	started := make(chan struct{})
	var once sync.Once
	var cancelObs func()
	testsupport.WaitUntil(t, "the session observable", 20*time.Second, func() bool {
		c, err := s.Observe(ctx, func(o pipeline.Observation) {
			if o.AllStarted {
				once.Do(func() { close(started) })
			}
		})
		cancelObs = c
		return err == nil
	})
	defer cancelObs()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the data source never started")
	}
	if r := <-s.Snapshot(pipeline.SnapshotRequest{Trigger: "ipc"}); r.Err != nil {
		t.Fatal(r.Err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	pd.close()
	<-served
	pd.mu.Lock()
	flags := pd.flushFlags
	pd.mu.Unlock()
	clone := uint64(plugins.NewFlushFlags(plugins.FlushReasonTraceClone, plugins.FlushInitiatorTraced, plugins.FlushCloneTargetUnknown))
	stopF := uint64(plugins.NewFlushFlags(plugins.FlushReasonTraceStop, plugins.FlushInitiatorTraced, plugins.FlushCloneTargetUnknown))
	if len(flags) < 2 || flags[len(flags)-1] != stopF || !slices.Contains(flags, clone) {
		t.Fatalf("flush flags %#x; want one %#x (the snapshot) and %#x last (the stop)", flags, clone, stopF)
	}
}
