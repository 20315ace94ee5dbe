package goplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/host"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/transport"
)

var _ transport.Transport = (*Plugin)(nil)

// Plugin is the Transport of a data source served by a plugin process: the
// service creates the SMB as a memfd, the plugin maps it and runs the same
// producer runtime as an in-process source on it, and its commits arrive
// over the plugin's gRPC stream. The plugin is untrusted: its commits go
// through the same validation as anyone's, and its trusted pid is the one
// the service started, not one it reports.
type Plugin struct {
	cfg    host.Config
	stderr *lineLogger
	plugin *host.Plugin
	mu     sync.Mutex // guards plugin against close from the service goroutine
	// ctx bounds the launch; close cancels it so a child hung in its
	// handshake is not waited for.
	ctx    context.Context
	cancel context.CancelFunc
	// configPath is "data_sources[i].config", for config problems.
	configPath string
	link       transport.Link // set by Start, before the plugin runs
}

// Config is what the session knows of a plugin data source instance
// (transport.PluginConfig, which the session fills in without linking
// this package).
type Config = transport.PluginConfig

// Host is the PluginHost tracepipe's sessions use (pipeline.Options.Plugins):
// it finds plugins in plugin_dir and runs each plugin data source over
// go-plugin. Stderr, when set, receives what plugins print while they are
// asked which data sources they serve.
type Host struct{ Stderr io.Writer }

// ResolvePlugins is ResolvePlugins with h.Stderr.
func (h Host) ResolvePlugins(ctx context.Context, cfg *config.Config) error {
	return ResolvePlugins(ctx, cfg, h.Stderr)
}

// NewPlugin is New.
func (Host) NewPlugin(cfg transport.PluginConfig) (transport.Transport, *smb.SMB, error) {
	p, s, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	return p, s, nil
}

// New builds the Transport of a data source that runs in the plugin
// executable cfg.Path, and the memfd SMB it writes into (the session's
// to read and to close). Nothing is started until Start.
func New(cfg Config) (*Plugin, *smb.SMB, error) {
	s, err := smb.NewMemfdSMB(fmt.Sprintf("tracepipe-ds%d", cfg.Index), cfg.SMBSize, cfg.PageSize)
	if err != nil {
		return nil, nil, err
	}
	stderr := &lineLogger{prefix: cfg.Label + " plugin: ", logf: cfg.Logf, bucket: newStderrBucket(cfg.StderrLineRate, cfg.StderrByteRate, time.Now)}
	ctx, cancel := context.WithCancel(context.Background())
	ps := &Plugin{ctx: ctx, cancel: cancel, stderr: stderr, configPath: fmt.Sprintf("data_sources[%d].config", cfg.Index)}
	ps.cfg = host.Config{
		Path:             cfg.Path,
		Name:             cfg.Name,
		DataSourceConfig: cfg.DataSourceConfig,
		SMB:              s,
		TargetBuffer:     cfg.TargetBuffer,
		Policy:           cfg.Policy,
		// After the plugin's Done no OnCommit runs (host.Plugin.Done).
		OnCommit:   func(data []byte) { ps.link.Deliver(data) },
		OnTriggers: cfg.OnTriggers,
		Stderr:     stderr,
		Limits:     host.Limits{Memory: cfg.MemoryLimit, CPU: cfg.CPULimit},
	}
	return ps, s, nil
}

// StderrLinesSuppressed is how many of the plugin's stderr lines were
// counted over its rate limits instead of logged.
func (ps *Plugin) StderrLinesSuppressed() uint64 { return ps.stderr.suppressedLines() }

func (ps *Plugin) Start(link transport.Link) error {
	ps.link = link // before the launch: commits come once it runs
	pl, err := host.Launch(ps.ctx, ps.cfg)
	if err != nil {
		return ps.describe(err)
	}
	ps.mu.Lock()
	ps.plugin = pl
	closed := ps.ctx.Err() != nil
	ps.mu.Unlock()
	if closed { // close ran during the launch
		pl.Kill()
		return fmt.Errorf("plugin %s: ended by the service during Start", ps.cfg.Path)
	}
	// The pid the service itself started, whatever the plugin claims.
	link.SetPID(int32(pl.Pid()))
	if err := pl.Start(); err != nil {
		return ps.describe(err)
	}
	return nil
}

// describe turns a launch or start error into what the user needs: when
// the plugin exited on its own, how it exited and the last lines it wrote
// to stderr ("exited with status 2 during Start: <lines>"); else the
// error, which carries the plugin's own reason.
func (ps *Plugin) describe(err error) error {
	ps.mu.Lock()
	pl := ps.plugin
	ps.mu.Unlock()
	var cfgErr *host.ConfigError
	if errors.As(err, &cfgErr) {
		return ps.configError(cfgErr)
	}
	st, exited := host.ExitOf(err)
	if pl != nil && ps.ctx.Err() == nil {
		st, exited = pl.WaitExit(exitWait)
	}
	if !exited {
		return err
	}
	msg := st + " during Start"
	if pl != nil {
		if lim := pl.LimitExceeded(); lim != "" {
			msg = lim + ": " + msg
		}
	}
	if lines := ps.stderr.last(); lines != "" {
		msg += ": " + lines
	}
	return fmt.Errorf("%s", msg)
}

// configError names each problem the plugin found by its full config
// path, data_sources[i].config.<key>.
func (ps *Plugin) configError(e *host.ConfigError) error {
	lines := make([]string, 0, len(e.Problems))
	for _, q := range e.Problems {
		path := ps.configPath
		if q.Path != "" {
			path += "." + q.Path
		}
		lines = append(lines, path+": "+q.Message)
	}
	return errors.New(strings.Join(lines, "\n"))
}

func (ps *Plugin) Flush(flushID uint64, flags plugins.FlushFlags) error {
	return ps.plugin.FlushWithFlags(flushID, uint64(flags))
}

func (ps *Plugin) ClearIncrementalState() { _ = ps.plugin.ClearIncrementalState() }

// Stop asks the plugin to stop. If the plugin process exited meanwhile,
// the error says how it exited (and what it wrote last), not what the
// dead connection made of the Stop call.
//
// Once the data source stopped and every commit arrived, the child's exit
// (gRPC shutdown, process exit, reaping: a few milliseconds) goes on in
// the background while the session scrapes, reads and closes its sinks;
// Close waits for it, so no plugin process outlives the session.
func (ps *Plugin) Stop() error {
	if ps.plugin == nil {
		return nil
	}
	err := ps.plugin.StopSource()
	if err == nil {
		go ps.plugin.End()
		return nil
	}
	ps.plugin.End() // ended even when Stop failed
	// A process that broke the connection by dying is reaped within
	// moments; a hung one is not waited for.
	if _, exited := ps.plugin.WaitExit(stopExitWait); exited {
		return ps.ExitErr()
	}
	return err
}

// PacketsDropped is 0: a plugin's own writer counters are not trusted; its
// losses show up in the buffer (trace_writer_packet_loss) and in the
// previous_packet_dropped flags of its sequences.
func (ps *Plugin) PacketsDropped() uint64 { return 0 }

func (ps *Plugin) Done() <-chan struct{} { return ps.plugin.Finished() }

func (ps *Plugin) Exited() <-chan struct{} { return ps.plugin.Done() }

// ExitErr says how the plugin went: its exit status when it exited, the
// stream error otherwise, and the last lines of its stderr.
func (ps *Plugin) ExitErr() error {
	msg := "commit stream ended"
	if err := ps.plugin.Err(); err != nil {
		msg = err.Error()
	}
	if st, ok := ps.plugin.WaitExit(exitWait); ok {
		msg = st
	}
	if lim := ps.plugin.LimitExceeded(); lim != "" {
		msg = lim + ": " + msg
	}
	if lines := ps.stderr.last(); lines != "" {
		msg += ": " + lines
	}
	return fmt.Errorf("%s", msg)
}

// Close ends the plugin process if it is still running: at once, unless
// it is already exiting after a successful stop, which is waited for
// (bounded by host's graceful exit timeout).
func (ps *Plugin) Close() {
	ps.cancel()
	ps.mu.Lock()
	pl := ps.plugin
	ps.mu.Unlock()
	if pl != nil {
		pl.Kill()
	}
	ps.stderr.finish()
}

// stderrLines is how many of a plugin's last stderr lines its errors quote.
const stderrLines = 3

// exitWait bounds the wait for a failing plugin's exit status.
const exitWait = 500 * time.Millisecond

// stopExitWait bounds the same wait after a failed Stop, which is on the
// session's stop path.
const stopExitWait = 100 * time.Millisecond

// maxStderrLine bounds one logged line of a plugin's stderr: a longer
// line is logged in pieces of this size.
const maxStderrLine = 4096

// StderrReportEvery is how often, at most, a plugin's suppressed stderr
// lines are reported while they go on.
const StderrReportEvery = time.Second

// lineLogger turns a plugin's stderr into log lines, within its rate
// limits, and keeps the last few for error messages.
type lineLogger struct {
	mu     sync.Mutex
	prefix string
	logf   func(string, ...any)
	buf    []byte
	tail   []string
	panic  string // the first "panic: " / "fatal error: " line, if any

	bucket *stderrBucket // nil: every line is logged
	// suppressed and suppressedBytes count the lines (and their bytes)
	// over the rate limit; reported counts what the log already said.
	suppressed, suppressedBytes uint64
	reported                    uint64
	lastReport                  time.Time
}

func (l *lineLogger) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.buf = append(l.buf, b...)
			b = nil
		} else {
			l.buf = append(l.buf, b[:i]...)
			b = b[i+1:]
		}
		// A long line (or one that never ends) is logged in pieces.
		for len(l.buf) >= maxStderrLine {
			l.line(l.buf[:maxStderrLine])
			l.buf = l.buf[maxStderrLine:]
		}
		if i >= 0 {
			l.line(l.buf)
			l.buf = l.buf[:0]
		}
	}
	if len(l.buf) == 0 {
		l.buf = nil // do not keep a large backing array
	}
	return n, nil
}

func (l *lineLogger) line(raw []byte) {
	if bytes.Contains(raw, []byte(" plugin-host")) {
		// go-plugin's own log lines: copies of the stderr lines logged
		// already ("[ERROR] plugin-host.name: panic: ...") or its view of
		// an exit the service reports itself.
		return
	}
	if l.bucket != nil && !l.bucket.allow(len(raw)) {
		l.suppressed++
		l.suppressedBytes += uint64(len(raw))
		if t := l.bucket.now(); t.Sub(l.lastReport) >= StderrReportEvery {
			l.lastReport = t
			l.report("so far")
		}
		l.keep(raw)
		return
	}
	if l.logf != nil {
		l.logf("%s%s", l.prefix, raw)
	}
	l.keep(raw)
}

// report logs how many stderr lines were suppressed, if any since the
// last report.
func (l *lineLogger) report(when string) {
	if l.suppressed == l.reported || l.logf == nil {
		return
	}
	l.reported = l.suppressed
	l.logf("%s%d stderr lines (%d bytes) suppressed %s (over its limits: %.0f lines and %.0f bytes a second, limits.stderr_lines_per_second and limits.stderr_bytes_per_second)",
		l.prefix, l.suppressed, l.suppressedBytes, when, l.bucket.lineRate, l.bucket.byteRate)
}

// finish logs the final count of suppressed lines; the stderr it counts
// must have ended (the plugin was killed, which waits for go-plugin's
// stderr relays).
func (l *lineLogger) finish() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.line(l.buf)
		l.buf = nil
	}
	l.report("in total")
}

// suppressedLines is how many stderr lines were counted, not logged.
func (l *lineLogger) suppressedLines() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.suppressed
}

// keep remembers a line for error messages.
func (l *lineLogger) keep(raw []byte) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return
	}
	s := string(raw)
	if l.panic == "" && (strings.HasPrefix(s, "panic: ") || strings.HasPrefix(s, "fatal error: ")) {
		l.panic = s
	}
	l.tail = append(l.tail, s)
	if len(l.tail) > stderrLines {
		l.tail = l.tail[len(l.tail)-stderrLines:]
	}
}

// last returns the last stderr lines, joined by " | ".
func (l *lineLogger) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tail
	if len(l.buf) > 0 {
		t = append(t[:len(t):len(t)], string(l.buf))
	}
	if l.panic != "" && (len(t) == 0 || t[0] != l.panic) {
		t = append([]string{l.panic, "..."}, t...)
	}
	return strings.Join(t, " | ")
}
