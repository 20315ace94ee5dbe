package main

import (
	"context"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/tracepipe/tracepipe/metrics"
	"github.com/tracepipe/tracepipe/sinks/natsink"
	"github.com/tracepipe/tracepipe/sinks/relay"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

func addServeNATSFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.natsURL, "from-nats", "", "read batches from this NATS server (nats://host:4222) instead of, or as well as, --listen")
	fl.StringVar(&f.subject, "subject", "", "with --from-nats: the subject nats sinks publish to")
	fl.StringVar(&f.durable, "durable", "tracepipe-serve", "with --from-nats: durable consumer name (serve resumes where it stopped)")
}

// serveNATS starts a NATS reader; its error (if it cannot start or fails
// to store) goes to errc. The returned function stops it.
func serveNATS(ctx context.Context, f serveFlags, store *remote.Store, logger *slog.Logger, logf func(string, ...any), errc chan<- error) (*natsink.Reader, func(), error) {
	rd := natsink.NewReader(natsink.ReaderOptions{URL: f.natsURL, Subject: f.subject, Durable: f.durable, Store: store, Logger: logger})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := rd.Run(ctx); err != nil {
			errc <- err
		}
	}()
	logf("serve: reading subject %s from %s (durable consumer %s), writing to %s", f.subject, f.natsURL, f.durable, f.out)
	return rd, func() { cancel(); <-done }, nil
}

// serveMetrics serves the receiver's metrics on addr.
func serveMetrics(addr string, store *remote.Store, srv *relay.Server, rd *natsink.Reader, logf func(string, ...any)) (func(), error) {
	shutdown, bound, err := metrics.Serve(addr, metrics.Receiver(store, srv, rd))
	if err != nil {
		return nil, err
	}
	logf("serve: metrics on http://%s/metrics", bound)
	return shutdown, nil
}
