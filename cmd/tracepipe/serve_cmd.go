package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tracepipe/tracepipe/sinks/natsink"
	"github.com/tracepipe/tracepipe/sinks/relay"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

const serveLong = `Receive traces from other machines and write them to trace files.

With --listen, serve accepts relay sinks (sinks[i].type: relay) of any
number of machines over TCP, optionally TLS, and writes one streamed trace
per (machine, session) into --out, named HOST-MACHINEID-SESSION.pftrace.
With --merge it writes one trace, merged.pftrace, holding every machine:
each remote packet carries machine_id (1, 2, ... per machine) and its
trusted_packet_sequence_id is remapped so that sequences never collide.

Every file is valid at each batch boundary. A state file beside it
(.state) records the last batch stored per session, so serve killed and
restarted on the same --out continues the files and suppresses the
batches senders resend.

A session that never sends a batch leaves no file. When serve finds
batches missing (a gap in a session's numbering) or refuses a batch, it
writes that into the trace as a receiver section of TraceStats, so
'tracepipe stats --fail-on-loss' on the received file fails and names the
gap; after each TraceStats of the sender it writes the packets it stored.

Every peer is bounded: hello, idle, frame and write timeouts, frame memory
across connections, connections, sessions per machine, sequence ids per
session, a window on batch numbers and an optional disk budget, each a flag
below, counted in /metrics and logged the first time it is hit (see
docs/serve.md).

SIGINT or SIGTERM stops serve within --shutdown-timeout; the files stay
complete.`

// serveFlags are the flags of `tracepipe serve`.
type serveFlags struct {
	listen, out                  string
	merge                        bool
	tlsCert, tlsKey, tlsClientCA string
	metricsAddr                  string
	natsURL, subject, durable    string
	maxConsumerMemory            string // --perfetto: what consumer sessions may hold together
	perfetto                     bool   // serve_perfetto.go: a drop-in traced
	procs                        int    // --perfetto: GOMAXPROCS (default 1; 0: the runtime's)
	logFormat                    string
	limits                       serveLimits
}

// serveLimits are the bounds serve keeps whatever its peers do (see
// docs/serve.md). Zero values take the defaults of relay and remote.
type serveLimits struct {
	maxConns              int
	helloTimeout          time.Duration
	idleTimeout           time.Duration
	frameTimeout          time.Duration
	writeTimeout          time.Duration
	frameMemory           int64
	maxSequences          int
	seqWindow             uint64
	maxSessionsPerMachine int
	maxDisk               int64
	shutdownTimeout       time.Duration
}

// defaultShutdownTimeout bounds serve's stop after a signal.
const defaultShutdownTimeout = 10 * time.Second

func addServeLimitFlags(fl *pflag.FlagSet, l *serveLimits) {
	fl.IntVar(&l.maxConns, "max-conns", relay.DefaultMaxConns, "relay connections served at once; more are refused")
	fl.DurationVar(&l.helloTimeout, "hello-timeout", relay.DefaultHelloTimeout, "a new connection's TLS handshake and hello must arrive within this")
	fl.DurationVar(&l.idleTimeout, "idle-timeout", relay.DefaultIdleTimeout, "close a relay connection silent this long between frames (its sender reconnects)")
	fl.DurationVar(&l.frameTimeout, "frame-timeout", relay.DefaultFrameTimeout, "a frame must arrive whole (and find frame memory) within this after its header")
	fl.DurationVar(&l.writeTimeout, "write-timeout", relay.DefaultWriteTimeout, "close a relay connection whose sender takes longer than this to accept an ack")
	fl.Int64Var(&l.frameMemory, "frame-memory", relay.DefaultFrameMemory, "bytes of frame buffers all relay connections may hold together")
	fl.IntVar(&l.maxSequences, "max-sequences", remote.DefaultMaxSequences, "with --merge: sequence ids one session may bring into the merged file; a batch with more is refused")
	fl.Uint64Var(&l.seqWindow, "seq-window", remote.DefaultSeqWindow, "refuse a batch numbered more than this beyond the session's last stored batch (relay and NATS)")
	fl.IntVar(&l.maxSessionsPerMachine, "max-sessions-per-machine", remote.DefaultMaxSessionsPerMachine, "sessions of one machine id attached at once; more are refused")
	fl.Int64Var(&l.maxDisk, "max-disk", 0, "bytes the files in --out may hold; batches beyond are refused (0: no limit)")
	fl.DurationVar(&l.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "after SIGINT/SIGTERM, stop within this whatever peers do")
}

// newServeCmd builds `tracepipe serve`.
func newServeCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve --listen ADDR --out DIR [--merge]",
		Short: "Receive traces from relay sinks (or a NATS subject) into trace files",
		Long:  serveLong,
		Example: `  tracepipe serve --listen :7010 --out traces/
  tracepipe serve --listen :7010 --out traces/ --merge
  tracepipe serve --listen :7010 --out traces/ --tls-cert srv.pem --tls-key srv-key.pem --tls-client-ca ca.pem`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.perfetto {
				bound, err := parseMemoryBound("--max-consumer-memory", f.maxConsumerMemory)
				if err != nil {
					return err
				}
				if f.procs < 0 {
					return usageError{fmt.Errorf("--procs %d: want 0 (the Go runtime's choice) or more", f.procs)}
				}
				return servePerfetto(cmd.Context(), cmd.ErrOrStderr(), bound, f.procs, f.metricsAddr)
			}
			if f.out == "" {
				return usageError{errors.New("serve needs --out DIR (or --perfetto)")}
			}
			if f.listen == "" && f.natsURL == "" {
				return usageError{errors.New("serve needs --listen ADDR or --from-nats URL")}
			}
			if (f.tlsCert == "") != (f.tlsKey == "") {
				return usageError{errors.New("--tls-cert and --tls-key go together")}
			}
			if f.tlsClientCA != "" && f.tlsCert == "" {
				return usageError{errors.New("--tls-client-ca needs --tls-cert and --tls-key")}
			}
			if f.natsURL != "" && f.subject == "" {
				return usageError{errors.New("--from-nats needs --subject")}
			}
			return serve(cmd.Context(), f, cmd.ErrOrStderr(), nil)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.listen, "listen", "", "address to accept relay senders on, e.g. :7010")
	fl.StringVar(&f.out, "out", "", "directory for the trace files (required)")
	fl.BoolVar(&f.merge, "merge", false, "write one merged trace with machine_id set instead of one per (machine, session)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "server certificate (PEM); enables TLS")
	fl.StringVar(&f.tlsKey, "tls-key", "", "server private key (PEM)")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "require client certificates signed by this CA (PEM)")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address at /metrics")
	addServeNATSFlags(fl, &f)
	addServeLimitFlags(fl, &f.limits)
	fl.StringVar(&f.maxConsumerMemory, "max-consumer-memory", "", "with --perfetto: refuse a consumer's session when the running sessions' buffers, shared memory buffers and read queues would add up to more than this, e.g. 8GiB (default: half of this machine's RAM; \"none\": no bound)")
	fl.BoolVar(&f.perfetto, "perfetto", false, "act as Perfetto's traced instead: serve Perfetto producers and the perfetto command on Perfetto's sockets (see README)")
	fl.IntVar(&f.procs, "procs", 1, "with --perfetto: threads that run the service's Go code at once (GOMAXPROCS; 0: the Go runtime's choice, the GOMAXPROCS variable or one per CPU). 1, as traced, costs the least CPU per traced byte; see docs/perfetto.md")
	addLogFormatFlag(c, &f.logFormat)
	return c
}

// serve runs until ctx is cancelled or a signal arrives. ready, if set,
// receives the relay listener's address once it accepts.
func serve(ctx context.Context, f serveFlags, stderr io.Writer, ready func(addr string)) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	stderr = &syncWriter{w: stderr} // connections log from their own goroutines
	logger, err := newLogger(stderr, f.logFormat, "")
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) { logger.Info(fmt.Sprintf(format, args...)) }
	l := f.limits
	store, err := remote.OpenStoreOptions(f.out, remote.StoreOptions{
		Merge: f.merge, MaxSequences: l.maxSequences, SeqWindow: l.seqWindow,
		MaxSessionsPerMachine: l.maxSessionsPerMachine, DiskBudget: l.maxDisk, Logger: logger,
	})
	if err != nil {
		return err
	}

	errc := make(chan error, 3)
	var closers []func()
	defer func() {
		// Stop within the shutdown bound whatever peers do: the files
		// are valid at every batch boundary, so giving up on a handler
		// stuck in the kernel loses nothing already acknowledged.
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
			store.Close()
		}()
		bound := l.shutdownTimeout
		if bound <= 0 {
			bound = defaultShutdownTimeout
		}
		select {
		case <-done:
		case <-time.After(bound):
			logger.Warn(fmt.Sprintf("serve: stopping after %s (--shutdown-timeout) with connections still ending", bound))
		}
		logf("serve: stopped: %d batches, %d packets stored; %d duplicates, %d gaps (%d batches missing)",
			store.Stats.Batches.Load(), store.Stats.Packets.Load(), store.Stats.Duplicates.Load(), store.Stats.Gaps.Load(), store.Stats.Missing.Load())
	}()
	var srv *relay.Server
	if f.listen != "" {
		opts := relay.ServerOptions{Store: store, Logger: logger, MaxConns: l.maxConns,
			HelloTimeout: l.helloTimeout, IdleTimeout: l.idleTimeout, FrameTimeout: l.frameTimeout,
			WriteTimeout: l.writeTimeout, FrameMemory: l.frameMemory}
		if f.tlsCert != "" {
			if opts.TLS, err = relay.ServerTLS(f.tlsCert, f.tlsKey, f.tlsClientCA); err != nil {
				return err
			}
		}
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		srv = relay.NewServer(opts)
		go func() { errc <- srv.Serve(ln) }()
		closers = append(closers, func() { srv.Close() })
		logf("serve: accepting relay senders on %s, writing to %s", ln.Addr(), f.out)
		if ready != nil {
			ready(ln.Addr().String())
		}
	}
	var rd *natsink.Reader
	if f.natsURL != "" {
		r, cancel, err := serveNATS(ctx, f, store, logger, logf, errc)
		if err != nil {
			return err
		}
		rd = r
		closers = append(closers, cancel)
	}
	if f.metricsAddr != "" {
		shutdown, err := serveMetrics(f.metricsAddr, store, srv, rd, logf)
		if err != nil {
			return err
		}
		closers = append(closers, shutdown)
	}
	select {
	case <-ctx.Done():
		stop()
		return nil
	case err := <-errc:
		return err
	}
}
