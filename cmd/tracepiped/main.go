// Command tracepiped is tracepipe's Perfetto service alone: a drop-in for
// Perfetto's traced. It serves Perfetto producers (apps built with the
// Perfetto SDK, traced_probes) and Perfetto consumers (the perfetto
// command) on Perfetto's sockets, exactly as `tracepipe serve --perfetto`
// does (package perfettosvc), in a program that links none of what the
// rest of tracepipe needs: no config files or plugins, no relay, NATS or
// CEL-filtered sinks, no control socket and no /metrics. It is that much
// smaller in memory: the file-backed pages a Go program maps grow with
// the packages it initializes, and gRPC alone (go-plugin's and the control
// socket's) costs an idle process about 4.7 MiB. A test keeps those
// modules out of its build (deps_test.go).
//
// It must not import anything that links gRPC, go-plugin, Prometheus,
// NATS or CEL; anything it needs beyond the service belongs in a package
// both it and cmd/tracepipe use.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/logline"
	"github.com/tracepipe/tracepipe/perfettosvc"
	"github.com/tracepipe/tracepipe/sinks"
)

// Exit codes, as tracepipe's.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

const usage = `tracepiped: act as Perfetto's traced

Usage: tracepiped [--max-consumer-memory SIZE] [--procs N]

Serves Perfetto producers on the producer socket and the perfetto command on
the consumer socket: PERFETTO_PRODUCER_SOCK_NAME and
PERFETTO_CONSUMER_SOCK_NAME, else /run/perfetto/traced-{producer,consumer}.sock
when /run/perfetto is writable, else /tmp/perfetto-producer and
/tmp/perfetto-consumer. Runs until SIGINT or SIGTERM.

It is ` + "`tracepipe serve --perfetto`" + ` in a smaller program (no /metrics: use that
for them). docs/perfetto.md says what it serves and how it differs from traced.

Flags:
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is tracepiped with its arguments, returning the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := pflag.NewFlagSet("tracepiped", pflag.ContinueOnError)
	fl.SetOutput(stderr)
	maxMem := fl.String("max-consumer-memory", "", "refuse a consumer's session when the running sessions' buffers, shared memory buffers and read queues would add up to more than this, e.g. 8GiB (default: half of this machine's RAM; \"none\": no bound)")
	procs := fl.Int("procs", 1, "threads that run the service's Go code at once (GOMAXPROCS; 0: the Go runtime's choice, the GOMAXPROCS variable or one per CPU). 1, as traced, costs the least CPU per traced byte")
	fl.Usage = func() {
		fmt.Fprint(stdout, usage)
		fl.SetOutput(stdout)
		fl.PrintDefaults()
		fl.SetOutput(stderr)
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "tracepiped: %v (see --help)\n", err)
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "tracepiped: unexpected argument %q (see --help)\n", fl.Arg(0))
		return exitUsage
	}
	bound, err := config.ParseMemoryBound(*maxMem)
	if err != nil {
		fmt.Fprintf(stderr, "tracepiped: --max-consumer-memory %v\n", err)
		return exitUsage
	}
	if *procs < 0 {
		fmt.Fprintf(stderr, "tracepiped: --procs %d: want 0 (the Go runtime's choice) or more\n", *procs)
		return exitUsage
	}
	stderr = logline.Locked(stderr) // connections log from their own goroutines
	logf := func(format string, args ...any) { fmt.Fprintf(stderr, "tracepipe: "+format+"\n", args...) }
	err = perfettosvc.Serve(ctx, perfettosvc.ServeOptions{
		Logger: slog.New(logline.NewHandler(stderr, "", sinks.DetailKey)), Logf: logf,
		MaxMemory: bound, Procs: *procs,
	})
	if err != nil {
		fmt.Fprintf(stderr, "tracepiped: %v\n", err)
		return exitError
	}
	return exitOK
}
