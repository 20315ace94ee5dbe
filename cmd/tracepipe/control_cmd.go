package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/control"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/sinks"
)

// exitNoTrigger: a start_tracing or stop_tracing session saw no trigger
// within trigger_timeout and ended without data (no trace written).
const exitNoTrigger = 4

// controlTimeout bounds a control command (a snapshot of a large buffer
// included).
const controlTimeout = 2 * time.Minute

// openControl opens the session's control socket; a name a live session
// holds is an error, any other failure only a warning (the session runs
// without control).
func openControl(svc *pipeline.Service, cfg *config.Config, stop func(), stderr io.Writer) (*control.Server, error) {
	dir, err := control.Dir()
	if err == nil {
		var srv *control.Server
		srv, err = control.Listen(dir, cfg.UniqueSessionName, svc.ControlHandler(cfg.UniqueSessionName, time.Now(), stop))
		if err == nil {
			return srv, nil
		}
	}
	if errors.Is(err, control.ErrNameTaken) {
		return nil, fmt.Errorf("unique_session_name: %w", err)
	}
	fmt.Fprintf(stderr, "tracepipe: warning: no control socket (tracepipe sessions/trigger/snapshot will not see this session): %v\n", err)
	return nil, nil
}

// dialSession connects to the session --session names.
func dialSession(sel string) (*control.Client, control.Endpoint, error) {
	dir, err := control.Dir()
	if err != nil {
		return nil, control.Endpoint{}, err
	}
	ep, err := control.Find(dir, sel)
	if err != nil {
		return nil, ep, err
	}
	c, err := control.Dial(ep)
	return c, ep, err
}

func newSessionsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sessions",
		Short: "List running sessions: name, pid, uptime, losses, ring overwrites, snapshots, memory, buffer fill",
		Long: `List running sessions: name, pid, uptime, losses, ring overwrites,
snapshots taken, memory and each buffer's fill.

LOSSES sums the data_loss counters of the session's stats (tracepipe stats
explains each). OVERWRITTEN counts the chunks a ring buffer overwrote in a
session that reads its buffers once, at stop or for snapshots (a flight
recorder): the ring keeping its newest data, which is what it is for; in a
streaming session (write_into_file) overwrites are losses and count there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := control.Dir()
			if err != nil {
				return err
			}
			eps, err := control.List(dir)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "%-20s %8s %10s %12s %12s %8s %9s %s\n", "NAME", "PID", "UPTIME", "LOSSES", "OVERWRITTEN", "SNAPS", "MEMORY", "BUFFERS")
			for _, ep := range eps {
				c, err := control.Dial(ep)
				if err != nil {
					continue
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Second)
				in, err := c.Info(ctx)
				cancel()
				c.Close()
				if err != nil {
					fmt.Fprintf(w, "%-20s %8d  (not answering: %v)\n", ep.Name, ep.PID, err)
					continue
				}
				var bufs []string
				for i, b := range in.GetBuffers() {
					name := b.GetName()
					if name == "" {
						name = fmt.Sprint(i)
					}
					bufs = append(bufs, fmt.Sprintf("%s %s %.0f%%", name, byteSize(b.GetSize()), 100*b.GetFill()))
				}
				name := in.GetName()
				if name == "" {
					name = "-"
				}
				fmt.Fprintf(w, "%-20s %8d %10v %12d %12d %8d %9s %s\n", name, in.GetPid(),
					(time.Duration(in.GetUptimeMs()) * time.Millisecond).Truncate(time.Second), in.GetLosses(), in.GetRingOverwrites(),
					in.GetSnapshotsTaken(), byteSize(in.GetMemoryBytes()), strings.Join(bufs, ", "))
			}
			return nil
		},
	}
}

// controlCmd builds a command that talks to one session.
func controlCmd(use, short string, args cobra.PositionalArgs, run func(ctx context.Context, c *control.Client, args []string, w, ew io.Writer) error) *cobra.Command {
	var sel string
	c := &cobra.Command{
		Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, a []string) error {
			cl, _, err := dialSession(sel)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), controlTimeout)
			defer cancel()
			if _, err := cl.Info(ctx); err != nil {
				return err
			}
			return run(ctx, cl, a, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	c.Flags().StringVar(&sel, "session", "", "the session's unique_session_name or pid (default: the only running session)")
	return c
}

func newControlCmds() []*cobra.Command {
	var out string
	snap := controlCmd("snapshot [-o FILE] [--session NAME|PID]", "Clone the running session now into a separate trace (Perfetto's --clone)", cobra.NoArgs,
		func(ctx context.Context, c *control.Client, _ []string, w, ew io.Writer) error {
			path := out
			if path != "" {
				abs, err := filepath.Abs(path)
				if err != nil {
					return err
				}
				path = abs
			}
			r, err := c.Snapshot(ctx, path, "")
			if err != nil {
				return err
			}
			for _, f := range r.GetFiles() {
				fmt.Fprintln(w, f)
			}
			fmt.Fprintf(ew, "tracepipe: snapshot %d: %d packets, %s, longest service pause %v\n",
				r.GetNumber(), r.GetPackets(), byteSize(r.GetBytes()), time.Duration(r.GetPauseUs())*time.Microsecond)
			return nil
		})
	snap.Flags().StringVarP(&out, "output", "o", "", "write the snapshot to this file (default: beside each file sink, <stem>.snap-<n>-manual.pftrace)")
	trig := controlCmd("trigger NAME... [--session NAME|PID]", "Activate triggers of the running session's trigger_config", cobra.MinimumNArgs(1),
		func(ctx context.Context, c *control.Client, names []string, w, _ io.Writer) error {
			r, err := c.Trigger(ctx, names)
			if err != nil {
				return err
			}
			fmt.Fprintf(w, "acted: %s; ignored (skipped or rate-limited): %d\n", strings.Join(r.GetActed(), " "), r.GetIgnored())
			return nil
		})
	rot := controlCmd("rotate [--session NAME|PID]", "Close the running session's files and continue in new ones (lttng rotate)", cobra.NoArgs,
		func(ctx context.Context, c *control.Client, _ []string, w, _ io.Writer) error {
			r, err := c.Rotate(ctx)
			if err != nil {
				return err
			}
			for _, f := range r.GetClosed() {
				fmt.Fprintln(w, f)
			}
			return nil
		})
	stop := controlCmd("stop [--session NAME|PID]", "Stop the running session gracefully (as SIGINT does)", cobra.NoArgs,
		func(ctx context.Context, c *control.Client, _ []string, _, _ io.Writer) error { return c.Stop(ctx) })
	return []*cobra.Command{newSessionsCmd(), trig, snap, rot, stop}
}

// serveAlerts serves the Alertmanager webhook at POST /alertmanager on
// addr (loopback when it names no host) until the returned stop is
// called; with tokenFile, every request must carry its bearer token.
// control.SessionAlertHandler turns notifications into the session's
// triggers; this function words the flags' errors and the startup line.
func serveAlerts(addr, tokenFile string, svc *pipeline.Service, log *slog.Logger) (func(), error) {
	addr, err := control.AlertListenAddr(addr)
	if err != nil {
		return nil, usageError{err}
	}
	var token string
	if tokenFile != "" {
		if token, err = control.ReadAlertToken(tokenFile); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--alert-addr: %w", err)
	}
	auth := "requests need the bearer token of --alert-token-file"
	if token == "" {
		auth = "no --alert-token-file: whoever reaches this address can fire the session's triggers"
	}
	sinks.LogDetail(log, slog.LevelInfo, []any{"addr", ln.Addr().String()}, "alertmanager webhook on http://%s/alertmanager (%s)", ln.Addr(), auth)
	return control.ServeAlerts(ln, control.SessionAlertHandler(svc, token, log)), nil
}
