package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/metrics"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/perfettosvc"
)

// servePerfetto is `tracepipe serve --perfetto`: act as Perfetto's traced.
// It listens on Perfetto's producer and consumer sockets
// (PERFETTO_PRODUCER_SOCK_NAME / PERFETTO_CONSUMER_SOCK_NAME, else
// /run/perfetto/traced-{producer,consumer}.sock when /run/perfetto is
// writable, else /tmp/perfetto-producer and /tmp/perfetto-consumer), one
// host per socket as traced (service id 1 on each), so that programs
// built for Perfetto produce into tracepipe and the perfetto command
// drives its sessions, until ctx ends or SIGINT/SIGTERM. With
// metricsAddr, /metrics reports each running session as run's does,
// labelled with its tracing session id.
func servePerfetto(ctx context.Context, stderr io.Writer, maxMemory int64, metricsAddr string) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	stderr = &syncWriter{w: stderr} // connections log from their own goroutines
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "tracepipe: "+format+"\n", args...) }
	reg := perfetto.NewProducers()
	prod := perfettoipc.NewHost(perfettoipc.NewProducerPort(reg))
	logger, err := newLogger(stderr, "text", "")
	if err != nil {
		return err
	}
	pc := &perfettosvc.PerfettoConsumers{Producers: reg, Logger: logger, MaxMemory: maxMemory}
	limitServeHeap(pc, os.Getenv("GOMEMLIMIT"), debug.SetMemoryLimit)
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
	if metricsAddr != "" {
		shutdown, bound, err := metrics.Serve(metricsAddr, metrics.Sessions(func() []metrics.LabeledSession {
			var out []metrics.LabeledSession
			for _, rs := range pc.Running() {
				out = append(out, metrics.LabeledSession{ID: strconv.FormatUint(rs.ID, 10), Src: rs.Service})
			}
			return out
		}))
		if err != nil {
			return err
		}
		defer shutdown()
		logf("metrics on http://%s/metrics", bound)
	}
	logf("serving Perfetto producers on %s and consumers on %s", pp, cp)
	<-ctx.Done()
	return nil
}

// limitServeHeap gives the Go runtime a soft memory limit that follows
// the consumer sessions as they start and end (their pipeline heap
// budgets and unread queues: PerfettoConsumers.HeapLimit), as run's
// limitHeap does for its one session, unless the user set GOMEMLIMIT.
func limitServeHeap(pc *perfettosvc.PerfettoConsumers, userLimit string, set func(int64) int64) {
	if userLimit != "" {
		return
	}
	pc.SetHeapLimit = func(n int64) { set(n) }
	set(pc.HeapLimit())
}
