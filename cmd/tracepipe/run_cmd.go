package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/tracepipe/tracepipe/transport/goplugin"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/tracefile"
	"github.com/tracepipe/tracepipe/transport/perfetto"
)

const runLong = `Record a trace: start the configured data sources, collect their packets
through shared memory buffers into the trace buffers, and stream them to the
configured sinks (a Perfetto trace file by default).

The config is the file given as the argument or with -c (YAML, TOML or
JSON, or a Perfetto text TraceConfig: .pbtxt, .textproto or .cfg, run as
traced would run it, its data sources served by Perfetto producers), or
the embedded default (configs/default.yaml: 10 s, process tree,
system counters and a synthetic load, streamed to
out/trace-<timestamp>.pftrace). TRACEPIPE_* environment variables and --set
flags override it, in that order; a text config is run as written, so only
its perfetto.* settings (TRACEPIPE_PERFETTO__*, --set perfetto.*), -o and
--duration apply.

On a terminal a status line shows elapsed time, bytes in and out, packets,
losses and buffer fill; otherwise run is quiet until the summary. SIGINT or
SIGTERM stops the session gracefully: a final flush, a final read and a
complete file. Signals within a second of the first are the same request;
a later one aborts (exit 130; the file still ends at a packet boundary).
-o - streams the trace to standard output; a name ending in .gz or .zst
is compressed accordingly. {timestamp} in a path is the start time to the
millisecond; a name already taken gets a -1, -2, ... suffix.

Every loss is counted in the trace's TraceStats packet: inspect it with
'tracepipe stats FILE'.`

// newRunCmd builds `tracepipe run`.
func newRunCmd() *cobra.Command {
	var (
		path, output string
		metricsAddr  string
		logFormat    string
		duration     time.Duration
		sets         []string
		alertAddr    string // control_cmd.go: the Alertmanager webhook
		alertToken   string // its bearer token file
		perfetto     bool
		maxMemory    string
	)
	c := &cobra.Command{
		Use:   "run [CONFIG | -c CONFIG] [-o OUTPUT] [--duration D] [--set key=value]...",
		Short: "Record a trace with a config (the embedded default when none is given)",
		Long:  runLong,
		Example: `  tracepipe run
  tracepipe run configs/long_streaming.yaml -o /tmp/long.pftrace
  tracepipe run -c trace_config.pbtxt -o t.pftrace --set perfetto.wait_for_producers=10s
  tracepipe run --duration 1m --set data_sources[2].config.rate=50000`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := configArg(cmd, &path, args); err != nil {
				return err
			}
			for _, s := range sets {
				if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
					return usageError{fmt.Errorf("--set %q: want key=value", s)}
				}
			}
			if _, err := newLogger(io.Discard, logFormat, ""); err != nil {
				return err
			}
			var cfg *config.Config
			var err error
			if config.IsTraceConfigText(path) {
				cfg, err = loadTextRunConfig(path, output, sets, cmd.Flags().Changed("duration"), duration, cmd.ErrOrStderr())
			} else {
				if perfetto {
					sets = append(sets, "perfetto.enabled=true")
				}
				if cmd.Flags().Changed("duration") {
					sets = append(sets, "duration="+duration.String())
				}
				cfg, err = loadRunConfig(path, output, sets, cmd.ErrOrStderr())
			}
			if err != nil {
				return err
			}
			if cfg.WritesStdout() && isTerminal(cmd.OutOrStdout()) {
				return usageError{errors.New("refusing to write a binary trace to the terminal (a file sink's path is \"-\"): redirect standard output (tracepipe run -o - > t.pftrace, or | a program) or name a file with -o")}
			}
			bound, err := parseMemoryBound("--max-memory", maxMemory)
			if err != nil {
				return err
			}
			return runSession(cmd.Context(), cfg, cmd.ErrOrStderr(), metricsAddr, alertAddr, alertToken, logFormat, bound)
		},
	}
	c.Flags().StringVarP(&path, "config", "c", "", "config file (YAML, TOML or JSON; or a Perfetto text TraceConfig: .pbtxt, .textproto, .cfg); default: the embedded default config")
	c.Flags().StringVarP(&output, "output", "o", "", "trace file path: replaces the first file sink's path (or adds a file sink)")
	c.Flags().DurationVar(&duration, "duration", 0, "session duration, e.g. 30s (overrides the config's duration; 0 = until SIGINT)")
	c.Flags().BoolVar(&perfetto, "perfetto", false, "act as traced for Perfetto producers: listen on Perfetto's producer socket (PERFETTO_PRODUCER_SOCK_NAME) and serve data sources they register (perfetto.enabled)")
	c.Flags().StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address at /metrics while the session runs")
	c.Flags().StringVar(&alertAddr, "alert-addr", "", "serve Prometheus Alertmanager's webhook on this address (POST /alertmanager; \":9466\" means loopback, name the host to listen elsewhere): each firing alert activates the trigger named by its alertname (or tracepipe_trigger label)")
	c.Flags().StringVar(&alertToken, "alert-token-file", "", "with --alert-addr: every webhook request must carry \"Authorization: Bearer <the file's content>\" (others get 401, counted and logged)")
	c.Flags().StringVar(&maxMemory, "max-memory", "", "refuse a config whose buffers and data sources' shared memory buffers add up to more than this, e.g. 8GiB (default: this machine's RAM; \"none\": no bound)")
	c.Flags().StringArrayVar(&sets, "set", nil, "override one config key, e.g. --set buffers[0].size_kb=65536 (repeatable; applied last)")
	addLogFormatFlag(c, &logFormat)
	return c
}

// configArg takes the config file from the one positional argument of
// run and validate (`tracepipe run my.yaml`, the way one first tries it),
// as -c does; both at once is a usage error.
func configArg(cmd *cobra.Command, path *string, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.Flags().Changed("config") {
		return usageError{fmt.Errorf("the config is given twice: -c %s and %s (give one)", *path, args[0])}
	}
	*path = args[0]
	return nil
}

// loadRunConfig loads the config; output, if set, replaces the first
// file sink's path (or adds a file sink).
func loadRunConfig(path, output string, sets []string, stderr io.Writer) (*config.Config, error) {
	return config.Load(config.LoadOptions{Path: path, Sets: sets, Env: os.Environ(), Output: output, Warn: warnTo(stderr)})
}

// loadTextRunConfig loads a Perfetto text TraceConfig (.pbtxt,
// .textproto, .cfg): mapped as the consumer port maps EnableTracing, with
// Perfetto producers enabled; --duration and -o apply, and --set of the
// perfetto.* settings (the rest of tracepipe's keys describe a session,
// which the text config does).
func loadTextRunConfig(path, output string, sets []string, durationSet bool, duration time.Duration, stderr io.Writer) (*config.Config, error) {
	for _, s := range sets {
		if !strings.HasPrefix(s, "perfetto.") {
			return nil, usageError{fmt.Errorf("--set %s: a Perfetto text config (%s) is run as written; only tracepipe's perfetto.* settings may be set (edit the text config, or write the session in YAML with data_sources[i].perfetto_config)", s, path)}
		}
	}
	opts := config.TraceConfigTextOptions{Output: output, Sets: sets, Env: os.Environ(), Warn: warnTo(stderr)}
	if durationSet {
		if duration <= 0 {
			return nil, usageError{fmt.Errorf("--duration %v: a Perfetto text config's duration_ms cannot be replaced by \"until stopped\" (give a positive duration)", duration)}
		}
		opts.Duration = duration
	}
	cfg, err := config.LoadTraceConfigText(path, opts)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		warnTo(stderr)(w)
	}
	return cfg, nil
}

// warnTo returns a config-load warning sink that prints to w.
func warnTo(w io.Writer) func(string) {
	return func(msg string) { fmt.Fprintln(w, "tracepipe: warning:", msg) }
}

// exitAborted is the exit code after a second stop request (128+SIGINT,
// as a shell reports a process killed by Ctrl-C).
const exitAborted = 130

// sameRequestWindow: a signal this soon after the first is the same stop
// request (timeout(1) signals the process, then its group; a terminal
// sends SIGINT to the whole foreground group), not a demand to abort.
const sameRequestWindow = time.Second

// removeEmpty removes the files of an aborted session that are still
// empty (a sink that has not written yet, as every sink without
// write_into_file): left behind, an empty .pftrace opens as no trace, and
// the next run with the same path is refused ("already exists").
func removeEmpty(files []string, stderr io.Writer) {
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && st.Size() == 0 && os.Remove(f) == nil {
			fmt.Fprintf(stderr, "tracepipe: removed %s: nothing was written to it\n", f)
		}
	}
}

// abortProcess ends the process on a second stop request; tests replace
// it.
var abortProcess = func(code int) { os.Exit(code) }

// stopRequests turns signals into actions: the first stops the session
// gracefully, any within sameRequestWindow of it are the same request,
// a later one aborts.
type stopRequests struct{ first time.Time }

// Signal actions.
const (
	sigStop = iota
	sigSame
	sigAbort
)

func (r *stopRequests) on(now time.Time) int {
	switch {
	case r.first.IsZero():
		r.first = now
		return sigStop
	case now.Sub(r.first) < sameRequestWindow:
		return sigSame
	}
	return sigAbort
}

// runSession runs one session with a status line on a terminal.
func runSession(ctx context.Context, cfg *config.Config, stderr io.Writer, metricsAddr, alertAddr, alertToken, logFormat string, maxMemory int64) error {
	tty := isTerminal(stderr)
	console := &syncWriter{w: stderr, tty: tty} // sinks log from their own goroutines
	stderr = console
	// Our handler stays installed for the whole session: a disposition
	// inherited from the parent (SIGINT ignored in a script's background
	// job) is replaced, and a second signal is ours to judge.
	signal.Reset(syscall.SIGINT, syscall.SIGTERM)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger, err := newLogger(stderr, logFormat, "")
	if err != nil {
		return err
	}
	opts := pipeline.Options{Logger: logger, Rotatable: true, MaxMemory: maxMemory, Plugins: goplugin.Host{}}
	if cfg.Perfetto.Enabled {
		reg, host, err := perfetto.ListenForSession(ctx, cfg, logger)
		if err != nil {
			return err
		}
		defer host.Close()
		opts.Perfetto = reg
	}
	svc, err := pipeline.New(cfg, opts)
	if err != nil {
		return err
	}
	limitHeap(svc, os.Getenv("GOMEMLIMIT"))
	ctl, err := openControl(svc, cfg, cancel, stderr) // control_cmd.go
	if err != nil {
		return err
	}
	if ctl != nil {
		defer ctl.Close()
	}
	if alertAddr == "" && alertToken != "" {
		return usageError{errors.New("--alert-token-file needs --alert-addr")}
	}
	if metricsAddr != "" { // metrics_cmd.go
		shutdown, err := serveSessionMetrics(metricsAddr, svc, stderr)
		if err != nil {
			return err
		}
		defer shutdown()
	}
	if alertAddr != "" {
		stopAlerts, err := serveAlerts(alertAddr, alertToken, svc, logger) // control_cmd.go
		if err != nil {
			return err
		}
		defer stopAlerts()
	}
	usr1 := make(chan os.Signal, 1) // SIGUSR1: a snapshot
	signal.Notify(usr1, syscall.SIGUSR1)
	defer signal.Stop(usr1)
	done := make(chan struct{})
	go func() {
		var req stopRequests
		for {
			select {
			case <-done:
				return
			case <-usr1:
				go func() {
					r := <-svc.Snapshot(pipeline.SnapshotRequest{Trigger: "sigusr1"})
					if r.Err != nil {
						fmt.Fprintf(stderr, "tracepipe: SIGUSR1 snapshot: %v\n", r.Err)
						return
					}
					fmt.Fprintf(stderr, "tracepipe: SIGUSR1 snapshot %d: %s\n", r.N, strings.Join(r.Files, ", "))
				}()
			case sig := <-sigs:
				switch req.on(time.Now()) {
				case sigStop:
					fmt.Fprintf(stderr, "tracepipe: %v: stopping… (Ctrl-C again to abort)\n", sig)
					cancel()
				case sigAbort:
					if cfg.WriteIntoFile {
						fmt.Fprintf(stderr, "tracepipe: %v again: aborting; the file ends at its last complete packet, without the final TraceStats\n", sig)
					} else {
						fmt.Fprintf(stderr, "tracepipe: %v again: aborting; nothing is written (write_into_file is false: the buffers are read only at the end)\n", sig)
					}
					removeEmpty(svc.Files(), stderr)
					abortProcess(exitAborted)
				}
			}
		}
	}()
	if tty {
		go func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					console.status(statusLine(svc.Status()))
				}
			}
		}()
	}
	res, err := svc.Run(ctx)
	close(done)
	console.clearStatus()
	if res != nil {
		if err == nil && res.TriggerTimedOut {
			// The files are removed before the summary, which then says
			// so: it never reports a file that no longer exists.
			for _, f := range res.Files {
				_ = os.Remove(f)
			}
			printDiscarded(stderr, res)
			return exitCodeError{code: exitNoTrigger, err: fmt.Errorf("trigger_timeout: no trigger acted within %v; no trace written", cfg.TriggerConfig.Timeout)}
		}
		printSummary(stderr, res, cfg.LossContext())
		if warn := importWarning(res, cfg); warn != "" { // run_import.go
			fmt.Fprintln(stderr, warn)
		}
		// A sink failure is already in the log and in the sink's summary
		// line: the exit error names the sink without a third copy.
		for _, sr := range res.Sinks {
			if err != nil && sr.Err != nil && errors.Is(err, sr.Err) {
				err = fmt.Errorf("sink %s failed (its summary line above says why); the session stopped (on_error: stop)", sr.Name)
				break
			}
		}
		if err == nil {
			// on_error: drop let the session finish; the run still failed
			// to deliver everything, and the exit code says so.
			for _, sr := range res.Sinks {
				if sr.Err != nil && sr.StopOnError {
					return fmt.Errorf("sink %s failed as the session ended (on_error: stop came too late to stop it): %w", sr.Name, sr.Err)
				}
				if sr.Err != nil {
					return fmt.Errorf("sink %s failed (on_error: drop; the session ran to its end): %w", sr.Name, sr.Err)
				}
			}
		}
	}
	return err
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// statusLine renders the live status.
func statusLine(st pipeline.Status) string {
	var b strings.Builder
	elapsed := st.Elapsed.Truncate(100 * time.Millisecond)
	if st.Duration > 0 {
		fmt.Fprintf(&b, "%v/%v", elapsed, st.Duration)
	} else {
		fmt.Fprintf(&b, "%v (until SIGINT)", elapsed)
	}
	fmt.Fprintf(&b, "  in %s  out %s  %d packets  losses %d", byteSize(st.BytesIn), byteSize(st.BytesOut), st.Packets, st.Losses-st.RingOverwrites)
	if st.RingOverwrites > 0 { // a ring read once keeps its newest data: not a loss
		fmt.Fprintf(&b, "  ring overwrote %d chunks", st.RingOverwrites)
	}
	for i, bs := range st.Buffers {
		name := bs.Name
		if name == "" {
			name = fmt.Sprintf("buffer %d", i)
		}
		fmt.Fprintf(&b, "  %s %.0f%%", name, 100*bs.Fill())
	}
	for _, f := range st.SinkFailures {
		fmt.Fprintf(&b, "  SINK FAILED %s", f)
	}
	for _, o := range st.SinkOutages {
		fmt.Fprintf(&b, "  UNREACHABLE %s", o)
	}
	return b.String()
}

// byteSize renders n bytes with a binary unit.
func byteSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// printSummary tells, per sink, exactly what reached its destination,
// and whether anything was lost.
func printSummary(w io.Writer, res *pipeline.Result, lc tracefile.LossContext) {
	for _, sr := range res.Sinks {
		dest := sr.Destination
		if n := len(sr.Files); n > 1 {
			dest = fmt.Sprintf("%s (%d files: %s ... %s)", sr.Destination, n, sr.Files[0], sr.Files[n-1])
		} else if n == 1 {
			dest = sr.Files[0]
		}
		fmt.Fprintf(w, "tracepipe: %s: wrote %d packets (%s) to %s", sr.Name, sr.Stats.PacketsWritten, byteSize(sr.Stats.BytesWritten), dest)
		st := sr.Stats
		var notes []string
		if st.PacketsFiltered > 0 {
			notes = append(notes, fmt.Sprintf("%d filtered out", st.PacketsFiltered))
		}
		if st.FilterErrors > 0 {
			notes = append(notes, fmt.Sprintf("%d filter errors", st.FilterErrors))
		}
		if n := st.PacketsDroppedQueue; n > 0 {
			notes = append(notes, fmt.Sprintf("%d dropped (queue full)", n))
		}
		if n := st.PacketsDroppedError; n > 0 {
			if sr.Err != nil {
				notes = append(notes, fmt.Sprintf("%d lost to the failure below", n))
			} else {
				notes = append(notes, fmt.Sprintf("%d lost to errors", n))
			}
		}
		if n := st.Reconnects; n > 0 {
			notes = append(notes, fmt.Sprintf("%d outage(s) of the destination, resumed", n))
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "; %s", strings.Join(notes, ", "))
		}
		fmt.Fprintln(w)
		if sr.Err != nil {
			fmt.Fprintf(w, "tracepipe: %s: FAILED: %v\n", sr.Name, sr.Err)
		}
	}
	for _, err := range res.StartErrors {
		fmt.Fprintf(w, "tracepipe: not recorded: %v\n", err)
	}
	printPluginFaults(w, res)
	printRefusals(w, res)
	var lost, ring []string
	for _, r := range tracefile.LossReport(res.Stats) {
		if r.Lost() {
			name := r.Name
			if r.Index >= 0 {
				name = fmt.Sprintf("%s[buffer %d]", r.Name, r.Index)
			}
			if lc.RingOverwrite(r) {
				ring = append(ring, fmt.Sprintf("%s=%d", name, r.Value))
			} else {
				lost = append(lost, fmt.Sprintf("%s=%d", name, r.Value))
			}
		}
	}
	if len(lost) > 0 {
		fmt.Fprintf(w, "tracepipe: data loss: %s (details: tracepipe stats %s)\n", strings.Join(lost, " "), firstOr(res.Files, "TRACE"))
	} else {
		fmt.Fprintln(w, "tracepipe: no data loss")
	}
	if len(ring) > 0 {
		fmt.Fprintf(w, "tracepipe: the ring buffer kept its newest data, overwriting the oldest: %s (a ring read once at the end does that; not a loss)\n", strings.Join(ring, " "))
	}
}

// printRefusals tells what was asked of the session from outside and
// turned down: triggers that did not act, snapshots refused, webhook
// requests refused (TraceStats counts them too).
func printRefusals(w io.Writer, res *pipeline.Result) {
	tr := res.Triggers
	if refused := tr.Unknown + tr.ProducerMismatch + tr.Skipped + tr.RateLimited + tr.Dropped; refused > 0 {
		fmt.Fprintf(w, "tracepipe: triggers: %d received, %d acted, %d refused (unknown %d, producer mismatch %d, skipped %d, rate-limited %d, queue full %d)\n",
			tr.Received, tr.Acted, refused, tr.Unknown, tr.ProducerMismatch, tr.Skipped, tr.RateLimited, tr.Dropped)
	}
	if sn := res.Snapshots; sn.Refused+sn.Failed > 0 {
		fmt.Fprintf(w, "tracepipe: snapshots: %d taken, %d refused (too many in flight or the session ending), %d failed\n", sn.Taken, sn.Refused, sn.Failed)
	}
	if tp := res.Stats.Tracepipe; tp != nil && tp.AlertRequestsRefused > 0 {
		fmt.Fprintf(w, "tracepipe: alertmanager webhook: %d request(s) refused (bad or missing token, malformed)\n", tp.AlertRequestsRefused)
	}
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// limitHeap gives the Go runtime a soft memory limit from the session's
// configuration (pipeline.Service.HeapBudget), unless the user set
// GOMEMLIMIT: the buffers live outside the heap, so without a limit the
// collector's default goal would let garbage grow to the size of the
// live batches again.
func limitHeap(svc *pipeline.Service, userLimit string) {
	if userLimit != "" {
		return
	}
	debug.SetMemoryLimit(svc.HeapBudget())
}

// parseMemoryBound reads a --max-memory style flag (config.ParseMemoryBound);
// the error names the flag.
func parseMemoryBound(flag, v string) (int64, error) {
	n, err := config.ParseMemoryBound(v)
	if err != nil {
		return 0, usageError{fmt.Errorf("%s %w", flag, err)}
	}
	return n, nil
}
