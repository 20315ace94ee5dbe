package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/tracepipe/tracepipe/plugins/internal/wire"
	"github.com/tracepipe/tracepipe/smb"
)

// DefaultStartTimeout bounds the handshake and Setup when
// Config.StartTimeout is zero.
const DefaultStartTimeout = 10 * time.Second

// Bounds of the calls after Launch (variables for tests).
var (
	// rpcTimeout bounds every control RPC.
	rpcTimeout = 10 * time.Second
	// stopDrainTimeout bounds Stop's wait for the commit stream to end.
	stopDrainTimeout = 5 * time.Second
	// gracefulExitTimeout bounds go-plugin's graceful shutdown before the
	// child is killed.
	gracefulExitTimeout = 3 * time.Second
	// exitWait bounds the wait for a failing child's exit status.
	exitWait = 500 * time.Millisecond
)

// Config says which plugin to launch and how to connect it.
type Config struct {
	// Path is the plugin executable.
	Path string
	// Name is the data source name (data_sources[i].name) the plugin must
	// serve.
	Name string
	// DataSourceConfig is the per-source config section, sent to the plugin
	// as a google.protobuf.Struct (numbers arrive as float64).
	DataSourceConfig map[string]any
	// SMB is the memfd-backed SMB (smb.NewMemfdSMB) the plugin writes into;
	// its Fd is passed to the child as fd 3. The caller keeps ownership and
	// must not close it before Stop returned or Done is closed.
	SMB *smb.SMB
	// TargetBuffer is the buffer id the plugin's writers must use.
	TargetBuffer uint32
	// Policy is the writers' buffer-exhausted policy.
	Policy smb.BufferExhaustedPolicy
	// OnCommit receives each encoded CommitData the plugin sends, in order,
	// from one goroutine. It may block (backpressure reaches the plugin's
	// writers). data is owned by the callee. Untrusted: decode and validate.
	OnCommit func(data []byte)
	// OnTriggers receives the trigger names the plugin's data source
	// activates, at most MaxTriggerNames per message, on the same
	// goroutine as OnCommit. Untrusted: the names are only looked up.
	// Nil ignores them.
	OnTriggers func(names []string)
	// Stderr receives the plugin's stderr and log output (nil: discarded).
	Stderr io.Writer
	// StartTimeout bounds the handshake plus Setup (default 10s).
	StartTimeout time.Duration
	// Limits bound the child's process tree (zero: none); a child that
	// breaks one dies, and LimitExceeded says which.
	Limits Limits
}

// Plugin is one running plugin child serving one data source instance.
// Its methods are safe for concurrent use; the child serialises the data
// source calls.
type Plugin struct {
	path string
	cmd  *exec.Cmd
	cli  *plugin.Client
	rpc  wire.DataSourceClient
	pid  int

	// ctx is cancelled by Kill and at the end of Stop; it bounds every RPC
	// and the commit stream.
	ctx    context.Context
	cancel context.CancelFunc

	tree   *tree
	limits Limits
	oom    *oomWatch

	onCommit func([]byte)
	onTrig   func([]string)
	done     chan struct{} // closed when the commit stream goroutine returned
	errMu    sync.Mutex
	err      error // why the commit stream ended (nil: cleanly after Stop)

	endOnce sync.Once
	ended   chan struct{} // closed once the child is gone

	finished     chan struct{} // see Finished; nil unless the data source is Finite
	finishedOnce sync.Once
}

// child is a started plugin process after the go-plugin handshake.
type child struct {
	cmd  *exec.Cmd
	cli  *plugin.Client
	rpc  wire.DataSourceClient
	tree *tree
	oom  *oomWatch
}

// kill ends the child and its whole process tree at once.
func (c *child) kill() {
	killGroup(c.cmd, c.cli)
	c.tree.kill()
	c.cli.Kill()
	c.tree.end()
}

// dial starts path (with smbFd, if >= 0, as its fd 3) in a contained
// process tree under limits and performs the go-plugin handshake within
// timeout (or until ctx ends).
func dial(ctx context.Context, path string, smbFd int, stderr io.Writer, timeout time.Duration, limits Limits) (*child, error) {
	c, err := dialOnce(ctx, path, smbFd, stderr, timeout, limits)
	if errors.Is(err, errCgroupClone) {
		// The kernel or a seccomp profile refused the clone into the
		// cgroup; the next try uses the sweep.
		c, err = dialOnce(ctx, path, smbFd, stderr, timeout, limits)
	}
	return c, err
}

// errCgroupClone is a child that could not be started into its cgroup.
var errCgroupClone = errors.New("starting the plugin into its cgroup failed")

func dialOnce(ctx context.Context, path string, smbFd int, stderr io.Writer, timeout time.Duration, limits Limits) (*child, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("plugin %s: "+format, append([]any{path}, args...)...)
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	startCtx, cancelStart := context.WithTimeout(ctx, timeout)
	defer cancelStart()

	if stderr == nil {
		stderr = io.Discard
	}
	oom := &oomWatch{}
	stderr = &lockedWriter{w: stderr, oom: oom}
	cmd := exec.Command(execPath(path))
	var smbFile *os.File
	if smbFd >= 0 {
		// A close-on-exec duplicate of the memfd: exec dup2s it to fd 3 of
		// the child only, and closing it afterwards leaves the caller's fd
		// alone.
		dupFd, err := unix.FcntlInt(uintptr(smbFd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fail("duplicating the SMB fd: %v", err)
		}
		smbFile = os.NewFile(uintptr(dupFd), "tracepipe-smb")
		cmd.ExtraFiles = []*os.File{smbFile} // fd 3 == wire.SMBFd
	}
	// Its own process group, so that ending it also ends whatever it
	// spawned (and a terminal's Ctrl-C reaches only the host, which stops
	// its plugins in order); SIGKILL if the host dies first (Linux
	// delivers it when the forking OS thread exits, which for a Go program
	// means the process, unless that thread was locked and released).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Beyond the group: the whole tree, setsid'd descendants included,
	// and the limits (contain_linux.go).
	tree, err := newTree(cmd, path, limits)
	if err != nil {
		if smbFile != nil {
			_ = smbFile.Close()
		}
		return nil, fail("%v", err)
	}
	cli := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		Plugins:          plugin.PluginSet{wire.PluginName: &wire.Plugin{}},
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     timeout,
		Stderr:           stderr, // the child's real stderr, line by line
		SyncStderr:       stderr, // os.Stderr of the child after sdk.Serve
		SyncStdout:       stderr,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:   "plugin-host",
			Output: stderr,
			Level:  hclog.Error,
		}),
	})

	type dialed struct {
		rpc plugin.ClientProtocol
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		rpc, err := cli.Client()
		tree.started(cmd, func() bool { return !cli.Exited() })
		// The child has its copy (or never started): close ours. Only this
		// goroutine may, since exec reads it until the child started.
		if smbFile != nil {
			_ = smbFile.Close()
		}
		ch <- dialed{rpc, err}
	}()
	var d dialed
	select {
	case d = <-ch:
	case <-startCtx.Done():
		go func() { <-ch; killGroup(cmd, cli); tree.kill(); cli.Kill(); tree.end() }()
		if ctx.Err() != nil {
			return nil, fail("handshake: %v", ctx.Err())
		}
		return nil, fail("handshake: no answer within %v", timeout)
	}
	c := &child{cmd: cmd, cli: cli, tree: tree, oom: oom}
	if d.err != nil && tree.cgroupFailed(cmd) {
		c.kill()
		return nil, errCgroupClone
	}
	if d.err != nil {
		// A child that exited on its own says more than the handshake error.
		st, exited := waitExit(cmd, cli, exitWait)
		c.kill()
		err := fail("handshake failed (not a tracepipe plugin built with plugins/sdk for protocol %d, or it crashed on start): %v", wire.Handshake.ProtocolVersion, d.err)
		if exited {
			return nil, &ExitError{Status: st, Err: err}
		}
		return nil, err
	}
	raw, err := d.rpc.Dispense(wire.PluginName)
	if err != nil {
		c.kill()
		return nil, fail("dispensing %q: %v", wire.PluginName, err)
	}
	rpc, ok := raw.(wire.DataSourceClient)
	if !ok {
		c.kill()
		return nil, fail("dispensing %q: unexpected client %T", wire.PluginName, raw)
	}
	c.rpc = rpc
	return c, nil
}

// ConfigError is a data source config the plugin rejected, with one
// problem per field (paths relative to the config section).
type ConfigError struct {
	Path     string // the plugin
	Name     string // the data source
	Problems []ConfigProblem
}

// ConfigProblem is one field the plugin found wrong ("" = the section).
type ConfigProblem struct {
	Path    string
	Message string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plugin %s: data source %q: config: ", e.Path, e.Name)
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		if p.Path != "" {
			b.WriteString(p.Path + ": ")
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

func configProblems(ps []*wire.ConfigProblem) []ConfigProblem {
	out := make([]ConfigProblem, 0, len(ps))
	for _, p := range ps {
		out = append(out, ConfigProblem{Path: p.GetPath(), Message: p.GetMessage()})
	}
	return out
}

// Launch starts the plugin child, performs the go-plugin handshake, sets the
// data source up (name, config, SMB geometry, target buffer, policy) and
// opens the commit stream. Errors name the plugin path and the problem; a
// config the plugin rejects is a *ConfigError. ctx bounds the launch only;
// the plugin outlives it.
func Launch(ctx context.Context, cfg Config) (*Plugin, error) {
	if cfg.Path == "" {
		return nil, errors.New("plugin: no executable path")
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("plugin %s: "+format, append([]any{cfg.Path}, args...)...)
	}
	var policy wire.BufferExhaustedPolicy
	switch {
	case cfg.Name == "":
		return nil, fail("no data source name")
	case cfg.SMB == nil || cfg.SMB.Fd() < 0:
		return nil, fail("needs a memfd-backed SMB (smb.NewMemfdSMB)")
	case cfg.OnCommit == nil:
		return nil, fail("no OnCommit callback")
	case cfg.Policy == smb.Drop:
		policy = wire.BufferExhaustedPolicy_BUFFER_EXHAUSTED_POLICY_DROP
	case cfg.Policy == smb.Stall:
		policy = wire.BufferExhaustedPolicy_BUFFER_EXHAUSTED_POLICY_STALL
	default:
		return nil, fail("unknown buffer exhausted policy %d", cfg.Policy)
	}
	config, err := wire.ConfigStruct(cfg.DataSourceConfig)
	if err != nil {
		return nil, fail("data source %q: %v", cfg.Name, err)
	}
	timeout := cfg.StartTimeout
	if timeout <= 0 {
		timeout = DefaultStartTimeout
	}
	c, err := dial(ctx, cfg.Path, cfg.SMB.Fd(), cfg.Stderr, timeout, cfg.Limits)
	if err != nil {
		return nil, err
	}
	p := &Plugin{
		path:     cfg.Path,
		cmd:      c.cmd,
		cli:      c.cli,
		rpc:      c.rpc,
		tree:     c.tree,
		limits:   cfg.Limits,
		oom:      c.oom,
		onCommit: cfg.OnCommit,
		onTrig:   cfg.OnTriggers,
		done:     make(chan struct{}),
		ended:    make(chan struct{}),
	}
	if c.cmd.Process != nil {
		p.pid = c.cmd.Process.Pid
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())

	setupCtx, cancelSetup := context.WithTimeout(ctx, timeout)
	defer cancelSetup()
	resp, err := p.rpc.Setup(setupCtx, &wire.SetupRequest{
		Name:         cfg.Name,
		Config:       config,
		PageSize:     uint32(cfg.SMB.PageSize()),
		SmbSize:      uint32(cfg.SMB.Size()),
		TargetBuffer: cfg.TargetBuffer,
		Policy:       policy,
	})
	if err != nil {
		p.Kill()
		return nil, fail("setup: %s", describe(err))
	}
	if len(resp.GetProblems()) > 0 {
		p.Kill()
		return nil, &ConfigError{Path: cfg.Path, Name: cfg.Name, Problems: configProblems(resp.GetProblems())}
	}
	if resp.GetFinite() {
		p.finished = make(chan struct{})
	}
	stream, err := p.rpc.Commits(p.ctx, &wire.CommitsRequest{})
	if err != nil {
		p.Kill()
		return nil, fail("opening the commit stream: %s", describe(err))
	}
	go p.readCommits(stream)
	return p, nil
}

// MaxTriggerNames bounds the trigger names taken from one plugin message;
// the rest are ignored.
const MaxTriggerNames = 64

// readCommits relays the commit stream to OnCommit until it ends.
func (p *Plugin) readCommits(stream grpc.ServerStreamingClient[wire.PluginMessage]) {
	defer close(p.done)
	for {
		m, err := stream.Recv()
		if err == nil && p.ctx.Err() != nil {
			err = p.ctx.Err() // killed: deliver nothing more
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			} else {
				err = fmt.Errorf("plugin %s: commit stream: %s", p.path, describe(err))
			}
			p.errMu.Lock()
			p.err = err
			p.errMu.Unlock()
			return
		}
		switch k := m.GetKind().(type) {
		case *wire.PluginMessage_CommitData:
			p.onCommit(k.CommitData)
		case *wire.PluginMessage_ActivateTriggers:
			if names := k.ActivateTriggers.GetTriggerNames(); p.onTrig != nil && len(names) > 0 {
				p.onTrig(names[:min(len(names), MaxTriggerNames)])
			}
		case *wire.PluginMessage_Done:
			if p.finished != nil {
				p.finishedOnce.Do(func() { close(p.finished) })
			}
		}
	}
}

// describe renders a gRPC error by its status message.
func describe(err error) string {
	if s, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s (%s)", s.Message(), s.Code())
	}
	return err.Error()
}

// call performs one control RPC, bounded by rpcTimeout (10 s).
func (p *Plugin) call(op string, rpc func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(p.ctx, rpcTimeout)
	defer cancel()
	if err := rpc(ctx); err != nil {
		select {
		case <-p.ended:
			return fmt.Errorf("plugin %s: %s: plugin is gone: %s", p.path, op, describe(err))
		default:
		}
		return fmt.Errorf("plugin %s: %s: %s", p.path, op, describe(err))
	}
	return nil
}

// Start starts the data source in the child.
func (p *Plugin) Start() error {
	return p.call("start", func(ctx context.Context) error {
		_, err := p.rpc.Start(ctx, &wire.StartRequest{})
		return err
	})
}

// Flush flushes the data source in the child, which then acknowledges with
// a commit carrying FlushRequestID = id on the commit stream (sent even if
// nothing else is pending). Flush returns once the child queued that commit,
// not once OnCommit saw it.
func (p *Plugin) Flush(id uint64) error { return p.FlushWithFlags(id, 0) }

// FlushWithFlags is Flush telling the plugin why (flags: Perfetto's
// FlushFlags encoding, plugins.FlushFlags); a plugin built before the
// field existed ignores them.
func (p *Plugin) FlushWithFlags(id, flags uint64) error {
	return p.call("flush", func(ctx context.Context) error {
		_, err := p.rpc.Flush(ctx, &wire.FlushRequest{FlushRequestId: id, Flags: flags})
		return err
	})
}

// ClearIncrementalState forwards to the data source in the child.
func (p *Plugin) ClearIncrementalState() error {
	return p.call("clear incremental state", func(ctx context.Context) error {
		_, err := p.rpc.ClearIncrementalState(ctx, &wire.ClearIncrementalStateRequest{})
		return err
	})
}

// Stop stops the data source in the child (which flushes its last
// commits), waits up to 5 s for the commit stream to drain and end, then
// ends the child. Once Stop returned without error, OnCommit has been called
// for every commit and will not be called again (after an error, wait for
// Done: an OnCommit that blocks keeps the stream goroutine alive). The
// child is ended even when Stop fails.
func (p *Plugin) Stop() error {
	err := p.StopSource()
	p.end(false)
	return err
}

// StopSource is the first half of Stop: it stops the data source and waits
// (up to 5 s) for the commit stream to drain and end, but leaves the child
// to exit later: End (or Kill) ends it. After StopSource returned without
// error, OnCommit has been called for every commit, so the caller can go on
// with the data while the child exits (which takes milliseconds: the gRPC
// shutdown, the process exit, the reaping).
func (p *Plugin) StopSource() error {
	err := p.call("stop", func(ctx context.Context) error {
		_, err := p.rpc.Stop(ctx, &wire.StopRequest{})
		return err
	})
	if err == nil {
		select {
		case <-p.done:
			err = p.Err()
		case <-time.After(stopDrainTimeout):
			err = fmt.Errorf("plugin %s: stop: the commit stream did not end within %v", p.path, stopDrainTimeout)
		}
	}
	return err
}

// End ends the child gracefully, as Stop does after StopSource (SIGKILL
// after 3 s), and returns once it is gone. A Kill or End already under way
// is waited for. It is idempotent and safe to call at any time.
func (p *Plugin) End() { p.end(false) }

// Kill ends the child at once (SIGKILL) and the commit stream with it. It
// is idempotent and safe to call at any time; while End (or Stop) is
// already ending the child, Kill waits for that instead. It does not wait for a
// running OnCommit call to return: wait for Done before releasing what
// OnCommit uses.
func (p *Plugin) Kill() { p.end(true) }

// end cancels the RPCs and the stream and ends the child: with kill, by
// SIGKILL first; else gracefully through go-plugin, with SIGKILL after
// gracefulExitTimeout.
func (p *Plugin) end(kill bool) {
	p.endOnce.Do(func() {
		p.cancel()
		if kill {
			p.signalKill()
		}
		exited := make(chan struct{})
		go func() {
			p.cli.Kill()
			close(exited)
		}()
		timeout := time.NewTimer(gracefulExitTimeout)
		defer timeout.Stop()
		poll := time.NewTicker(exitPoll)
		defer poll.Stop()
		treeKilled := false
	wait:
		for {
			select {
			case <-exited:
				break wait
			case <-poll.C:
				// Once the child is gone, what it started goes too: a
				// descendant holding the child's stderr open would keep
				// go-plugin from reaping it and its Kill waiting.
				if !treeKilled && (p.cli.Exited() || p.tree.childExited()) {
					p.tree.kill()
					treeKilled = true
				}
			case <-timeout.C:
				p.signalKill()
				<-exited
				break wait
			}
		}
		// What the child started ends with it.
		p.tree.end()
		close(p.ended)
	})
	<-p.ended
}

func (p *Plugin) signalKill() {
	killGroup(p.cmd, p.cli)
	p.tree.kill()
}

// killGroup SIGKILLs the child and its process group. The group is only
// signalled while the child is not reaped yet (its pid, which is the group
// id, cannot have been reused then); the child itself is signalled through
// os.Process, which is harmless after it was reaped.
func killGroup(cmd *exec.Cmd, cli *plugin.Client) {
	if cmd.Process == nil {
		return
	}
	if !cli.Exited() {
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	_ = cmd.Process.Kill()
}

// Pid is the child's process id (the service stamps it as trusted_pid).
func (p *Plugin) Pid() int { return p.pid }

// Done is closed when the commit stream has ended and its goroutine
// returned: after it, OnCommit is never called again.
func (p *Plugin) Done() <-chan struct{} { return p.done }

// Err says why the commit stream ended: nil while it runs and after a clean
// end (the child's Stop), else the error (a crash, Kill, a broken
// connection).
func (p *Plugin) Err() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.err
}

// lockedWriter serialises the writes of go-plugin's several stderr relays
// and lets oom watch them.
type lockedWriter struct {
	mu  sync.Mutex
	w   io.Writer
	oom *oomWatch
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.oom.see(b)
	return l.w.Write(b)
}

// execPath is the path to exec for a plugin path: a plugin is always a
// file, never a command looked up in $PATH, so a bare name ("my-plugin",
// as filepath.Join(".", "my-plugin") makes of a plugin in the current
// directory) is run as "./my-plugin".
func execPath(path string) string {
	if strings.ContainsRune(path, filepath.Separator) {
		return path
	}
	return "." + string(filepath.Separator) + path
}
