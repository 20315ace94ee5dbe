package perfettosvc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/transport/perfetto"
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Logger receives the sessions' records; Logf the service's own
	// lines (the sockets, a peer refused). Both are called from any
	// goroutine. Nil: discarded.
	Logger *slog.Logger
	Logf   func(format string, args ...any)
	// MaxMemory bounds what the consumers' running sessions may hold
	// together (PerfettoConsumers.MaxMemory).
	MaxMemory int64
	// Procs is the GOMAXPROCS to run with, restored on return; 0 leaves
	// the runtime's. traced runs on one thread; so does tracepipe by
	// default (its callers' default is 1).
	Procs int
	// Started, when set, is called once both sockets listen, with the
	// consumers (to report their sessions, as /metrics does); the
	// function it returns runs when Serve returns.
	Started func(pc *PerfettoConsumers) (stop func(), err error)
}

// Serve acts as Perfetto's traced until ctx ends or SIGINT/SIGTERM: it
// listens on Perfetto's producer and consumer sockets
// (config.PerfettoProducerSocket and PerfettoConsumerSocket: the
// PERFETTO_*_SOCK_NAME variables, else /run/perfetto/… when writable,
// else /tmp/perfetto-…), one IPC host per socket as traced (service id 1
// on each), so that programs built for Perfetto produce into tracepipe
// and the perfetto command drives its sessions. Unless the user set
// GOMEMLIMIT, the runtime's soft memory limit follows the sessions
// (limitHeap); unless they set GOGC, the collector runs at
// serveGCPercent.
func Serve(ctx context.Context, o ServeOptions) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.Procs < 0 {
		return fmt.Errorf("procs %d: want 0 (the Go runtime's choice) or more", o.Procs)
	}
	if o.Procs > 0 {
		// Restored on return: tests run Serve in their own process.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(o.Procs))
	}
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(serveGCPercent))
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	reg := perfetto.NewProducers()
	prod := perfettoipc.NewHost(perfettoipc.NewProducerPort(reg))
	pc := &PerfettoConsumers{Producers: reg, Logger: o.Logger, MaxMemory: o.MaxMemory}
	limitHeap(pc, os.Getenv("GOMEMLIMIT"), debug.SetMemoryLimit)
	cons := perfettoipc.NewHost(perfettoipc.NewConsumerPort(pc))
	prod.Logf, cons.Logf = logf, logf
	defer prod.Close()
	defer cons.Close()
	pp, cp := config.PerfettoProducerSocket(), config.PerfettoConsumerSocket()
	if err := prod.Listen(pp); err != nil {
		return err
	}
	if err := cons.Listen(cp); err != nil {
		return err
	}
	if o.Started != nil {
		done, err := o.Started(pc)
		if err != nil {
			return err
		}
		if done != nil {
			defer done()
		}
	}
	logf("serving Perfetto producers on %s and consumers on %s", pp, cp)
	<-ctx.Done()
	return nil
}

// serveGCPercent is the service's GOGC unless the user set one. Its Go
// heap is small (a few MiB: the buffers and batches are mapped apart) and
// it allocates little once sessions run, so the runtime's default, which
// lets garbage grow to the live heap's size and at least 4 MiB, was a
// third of what the service held above its buffers; at 50 the collector
// runs a few more times a second at most. Issue 27 measured 0.8 MiB less
// peak RSS with 200-byte packets.
const serveGCPercent = 50

// limitHeap gives the Go runtime a soft memory limit that follows the
// consumer sessions as they start and end (their pipeline heap budgets
// and unread queues: PerfettoConsumers.HeapLimit), as `tracepipe run`
// does for its one session, unless the user set GOMEMLIMIT (userLimit).
func limitHeap(pc *PerfettoConsumers, userLimit string, set func(int64) int64) {
	if userLimit != "" {
		return
	}
	pc.SetHeapLimit = func(n int64) { set(n) }
	set(pc.HeapLimit())
}
