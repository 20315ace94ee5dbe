// Command tracepipe records traces: producers write into shared memory
// buffers, the service collects their chunks into trace buffers and streams
// packets to sinks, and the result opens in Perfetto's tools.
//
// The command tree is built by newRootCmd and executed in-process by run,
// which maps errors to exit codes (exitOK, exitError, exitUsage,
// exitDataLoss), so tests drive the CLI exactly as main does.
//
// This package is flags, output formatting (tables, JSON lines, charts,
// warnings) and exit codes. Domain logic that a test or another tool could
// want belongs in a library package: the stats scan and rotated sets in
// tracefile, the eval replay in protovm/eval, import prediction in
// tpimport, the session in pipeline. The wiring of sessions, sinks and
// servers for `run` and `serve` stays here.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/celfilter"

	"github.com/spf13/cobra"
)

// Exit codes of the tracepipe command.
const (
	exitOK       = 0 // success
	exitError    = 1 // runtime error: unreadable file, bad config, ...
	exitUsage    = 2 // usage error: unknown command or flag, wrong arguments
	exitDataLoss = 3 // `stats --fail-on-loss` found data loss
	exitProblems = 3 // `check` found problems trace_processor will have
)

const rootLong = `tracepipe is a tracing pipeline built on the dataflow of Perfetto's tracing
service, and writes trace files that Perfetto's tools (ui.perfetto.dev,
trace_processor) open.

  producers      data sources, in-process or go-plugin plugins, write trace
                 packets through TraceWriters into a shared memory buffer (SMB)
  SMB            chunks are committed to the service (CommitData), which
                 copies them out, untrusted, and validates them
  TraceBuffer    one ring (or discard) buffer per configured buffer keeps
                 chunks in per-sequence order, applies patches, reassembles
                 fragmented packets and counts every loss
  ProtoVM        packets about to be overwritten are folded into a compact
                 per-data-source state, so incremental state survives the ring
  sinks          readback stamps trusted fields and fans packets out to the
                 file, relay and NATS sinks, each with an optional CEL filter
  trace file     a Perfetto-compatible Trace (plain, gzip or zstd), valid at
                 every packet boundary, ending with a TraceStats packet

Commands:
  run        record a trace with a config (the embedded default when none is given)
  validate   load and check a config, optionally print the effective config
  config     print the config's JSON Schema (for editors) or its reference
  stats      print the data-loss table of a trace's last TraceStats packet
  inspect    summarise a trace: sequences, sizes, time range, first packets
  protovm    compile ProtoVM programs and replay traces through them
  check      predict trace_processor's import: skipped packets, error stats
  serve      receive traces from other machines (relay sinks, NATS)
  plugins    list data-source plugins: their sources, descriptions, config keys
  sessions, trigger, snapshot, rotate, stop
             control running sessions (their control sockets)

Exit codes: 0 ok, 1 error, 2 usage error, 3 data loss found by
'stats --fail-on-loss' or problems found by 'check', 4 'run' of a
start_tracing/stop_tracing session that no trigger reached in time.`

// newRootCmd builds the tracepipe command tree.
func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "tracepipe",
		Short: "Record, validate and inspect Perfetto-compatible traces",
		Long:  rootLong,
		// Errors are printed by run, as "tracepipe: <error>"; usage is
		// shown only for usage errors.
		SilenceErrors: true,
		SilenceUsage:  true,
		// Required flags and flag groups are checked here rather than by
		// cobra after the hooks, so that a missing flag is a usage error.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := cmd.ValidateRequiredFlags(); err != nil {
				return usageError{err}
			}
			if err := cmd.ValidateFlagGroups(); err != nil {
				return usageError{err}
			}
			return nil
		},
	}
	root.Version = version()
	root.SetVersionTemplate("tracepipe {{.Version}}\n")
	// `tracepipe completion bash|zsh|fish|powershell` is listed in the
	// help (cobra's default command; it was hidden).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(
		newRunCmd(), // run_cmd.go: `tracepipe run`, owned by the lead
		newValidateCmd(),
		newStatsCmd(),
		newInspectCmd(),
		newProtoVMCmd(),
		newCheckCmd(),   // check_cmd.go
		newPluginsCmd(), // plugins_cmd.go: `tracepipe plugins`
		newServeCmd(),   // serve_cmd.go: receive relay and NATS streams
		newConfigCmd(),  // config_cmd.go: JSON Schema and reference of the config
	)
	root.AddCommand(newControlCmds()...) // control_cmd.go: sessions, trigger, snapshot, rotate, stop

	// perfetto_sources_cmd.go: what Perfetto producers registered.
	root.AddCommand(newPerfettoSourcesCmd())
	classifyUsageErrors(root)
	return root
}

// usageError marks an error as a usage error (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCodeError makes run exit with code instead of exitError.
type exitCodeError struct {
	code int
	err  error
}

func (e exitCodeError) Error() string { return e.err.Error() }
func (e exitCodeError) Unwrap() error { return e.err }

// classifyUsageErrors walks the command tree so that argument errors are
// usage errors: each command's Args validator is wrapped, and a command
// that only groups subcommands gets a validator rejecting unknown ones
// (cobra would otherwise print help and succeed for `tracepipe protovm x`)
// and a RunE that shows its help.
func classifyUsageErrors(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = unknownSubcommand
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil {
				var u usageError
				if errors.As(err, &u) {
					return err
				}
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		classifyUsageErrors(sub)
	}
}

// unknownSubcommand rejects any positional argument of a command that only
// groups subcommands, suggesting close names as cobra does.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}

// oneTraceArg accepts exactly one positional argument, the trace file.
func oneTraceArg(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{fmt.Errorf("%s takes one trace file, got %d arguments", cmd.CommandPath(), len(args))}
	}
	return nil
}

// run executes the tracepipe command line args (without the program name)
// and returns the process exit code. Errors are written to stderr as
// "tracepipe: <error>".
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// runContext is run with a context that commands see as cmd.Context().
func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "tracepipe: %v\n", err)
	var u usageError
	var x exitCodeError
	switch {
	case errors.As(err, &u):
		path := root.CommandPath()
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", path)
		return exitUsage
	case errors.As(err, &x):
		return x.code
	}
	return exitError
}

// tracepipe takes filters (sink sections' filter:, protovm apply
// --filter), and runs plugin data sources (run_cmd.go's
// pipeline.Options.Plugins); tracepiped does neither.
func init() { sinks.UseFilterCompiler(celfilter.Compile) }

// main installs no signal handler: offline commands stop at the default
// SIGINT, and a command that must shut down cleanly (run) derives its own
// context with signal.NotifyContext(cmd.Context(), ...).
func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
