package main

import (
	"errors"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/pipeline"
)

const serveLong = `Act as Perfetto's traced: listen on Perfetto's producer and consumer
sockets, so that programs built for Perfetto (SDK apps, traced_probes)
produce into tracepipe and the perfetto command drives its sessions:

  tracepipe serve --perfetto &
  traced_probes &                      # or any Perfetto SDK app
  perfetto -c config.pbtxt --txt -o trace.pftrace

Sockets: PERFETTO_PRODUCER_SOCK_NAME and PERFETTO_CONSUMER_SOCK_NAME, else
/run/perfetto/traced-{producer,consumer}.sock when /run/perfetto is
writable, else /tmp/perfetto-producer and /tmp/perfetto-consumer.
Runs until SIGINT or SIGTERM. See README "Using tracepipe as traced".`

// newServeCmd builds `tracepipe serve`.
func newServeCmd() *cobra.Command {
	var perfetto bool
	c := &cobra.Command{
		Use:   "serve --perfetto",
		Short: "Serve Perfetto producers and consumers on Perfetto's sockets (a drop-in traced)",
		Long:  serveLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !perfetto {
				return usageError{errors.New("serve needs --perfetto (the only protocol it serves)")}
			}
			stderr := cmd.ErrOrStderr()
			logf := func(format string, args ...any) { fmt.Fprintf(stderr, "tracepipe: "+format+"\n", args...) }
			reg := pipeline.NewPerfettoProducers()
			prod := perfettoipc.NewHost(perfettoipc.NewProducerPort(reg))
			cons := perfettoipc.NewHost(perfettoipc.NewConsumerPort(&pipeline.PerfettoConsumers{Producers: reg, Logf: logf}))
			prod.Logf, cons.Logf = logf, logf
			defer prod.Close()
			defer cons.Close()
			pp, cp := pipeline.PerfettoProducerSocket(), pipeline.PerfettoConsumerSocket()
			if err := prod.Listen(pp); err != nil {
				return err
			}
			if err := cons.Listen(cp); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "tracepipe: serving Perfetto producers on %s and consumers on %s\n", pp, cp)
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			<-ctx.Done()
			return nil
		},
	}
	c.Flags().BoolVar(&perfetto, "perfetto", false, "speak Perfetto's IPC on its producer and consumer sockets")
	return c
}
