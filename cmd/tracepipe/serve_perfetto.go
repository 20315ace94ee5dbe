package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/tracepipe/tracepipe/config"
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
// drives its sessions, until ctx ends or SIGINT/SIGTERM.
func servePerfetto(ctx context.Context, stderr io.Writer, maxMemory int64) error {
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
	cons := perfettoipc.NewHost(perfettoipc.NewConsumerPort(&perfettosvc.PerfettoConsumers{Producers: reg, Logger: logger, MaxMemory: maxMemory}))
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
	logf("serving Perfetto producers on %s and consumers on %s", pp, cp)
	<-ctx.Done()
	return nil
}
