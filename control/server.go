package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"

	"github.com/tracepipe/tracepipe/control/ctlapi"
	"github.com/tracepipe/tracepipe/control/internal/ctlpb"
	"github.com/tracepipe/tracepipe/internal/peerlimit"
)

// The session's side of the socket (package ctlapi, which the session
// core implements without linking gRPC).
type (
	Info           = ctlapi.Info
	BufferInfo     = ctlapi.BufferInfo
	SnapshotResult = ctlapi.SnapshotResult
	Handler        = ctlapi.Handler
	TriggerNamer   = ctlapi.TriggerNamer
)

// Server serves one session's control socket.
type Server struct {
	path string
	ln   *peerlimit.Listener
	g    *grpc.Server
	done chan struct{}
}

// ListenOptions bound what the control socket's peers can hold.
type ListenOptions struct {
	// Limits bound the connections served at once, in all and per peer
	// uid (SO_PEERCRED); zero fields: DefaultLimits'. Connections over
	// them are closed at once.
	Limits peerlimit.Limits
	// IdleTimeout closes a connection that has not finished its HTTP/2
	// handshake this long after it connected, or that has carried no call
	// for this long (default DefaultIdleTimeout).
	IdleTimeout time.Duration
	// Logf reports refused connections, at most once a second (nil:
	// silent).
	Logf func(format string, args ...any)

	// lookup fakes peer uids in tests (nil: SO_PEERCRED).
	lookup func(*net.UnixConn) (peerlimit.Cred, error)
}

// DefaultLimits are the control socket's connection bounds. The socket is
// its owner's alone (mode 0600), so per uid is per user and root.
var DefaultLimits = peerlimit.Limits{Max: 64, PerUID: 32}

// DefaultIdleTimeout is ListenOptions.IdleTimeout's default.
const DefaultIdleTimeout = 10 * time.Second

// Listen is ListenWith and the default bounds.
func Listen(dir, name string, h Handler) (*Server, error) {
	return ListenWith(dir, name, h, ListenOptions{})
}

// ListenWith creates the session's socket in dir and serves h on it,
// within opts' bounds. A name a live session already uses is refused
// (ErrNameTaken); a socket left by a dead session (its process gone, or
// nothing answering) is removed and replaced.
func ListenWith(dir, name string, h Handler, opts ListenOptions) (*Server, error) {
	if name != "" {
		if err := ValidName("session", name); err != nil {
			return nil, fmt.Errorf("unique_session_name: %w", err)
		}
	}
	if err := claimName(dir, name); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, socketName(name, os.Getpid()))
	if len(path) > 107 {
		return nil, fmt.Errorf("control: socket path %s is longer than a UNIX socket allows (107 bytes)", path)
	}
	if _, err := os.Lstat(path); err == nil {
		if answers(Endpoint{Path: path, PID: os.Getpid()}) {
			return nil, fmt.Errorf("control: %s is already served by this process", path)
		}
		// Left by an earlier process with our pid: stale.
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control: removing stale socket: %w", err)
		}
	}
	// Bind under a temporary name, restrict it, then rename it into
	// place: no client ever sees the socket with the umask's mode.
	tmp := filepath.Join(dir, fmt.Sprintf(".%d.tmp", os.Getpid()))
	_ = os.Remove(tmp)
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		ln.Close()
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("control: %w", err)
	}
	idle := opts.IdleTimeout
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	lim := opts.Limits
	if lim.Max <= 0 {
		lim.Max = DefaultLimits.Max
	}
	if lim.PerUID <= 0 {
		lim.PerUID = DefaultLimits.PerUID
	}
	bounded := &peerlimit.Listener{UnixListener: ln.(*net.UnixListener), Set: peerlimit.NewSet(lim),
		Log: &peerlimit.RefusalLog{Logf: opts.Logf}, What: "control", Lookup: opts.lookup}
	g := grpc.NewServer(grpc.MaxRecvMsgSize(MaxRequestBytes), grpc.MaxConcurrentStreams(16),
		grpc.ConnectionTimeout(idle), grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idle}))
	ctlpb.RegisterControlServer(g, &service{h: h})
	s := &Server{path: path, ln: bounded, g: g, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = g.Serve(bounded)
	}()
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Close stops serving (waiting at most a second for calls in progress
// and connections in their handshake) and removes the socket.
func (s *Server) Close() error {
	t := time.AfterFunc(time.Second, func() {
		s.ln.CloseConns() // gRPC's Stop waits for connections still in their handshake
		s.g.Stop()
	})
	s.g.GracefulStop()
	t.Stop()
	<-s.done
	err := os.Remove(s.path)
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return err
}

// claimName refuses a name a live session holds and removes the sockets
// of dead ones with that name.
func claimName(dir, name string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	for _, e := range ents {
		ep, ok := parseSocket(dir, e.Name())
		if !ok || ep.Name != name {
			continue
		}
		if name == "" {
			if !alive(ep.PID) {
				_ = os.Remove(ep.Path) // stale: its session is gone
			}
			continue // unnamed sessions do not collide
		}
		if answers(ep) {
			return fmt.Errorf("%w: %q (pid %d, %s)", ErrNameTaken, name, ep.PID, ep.Path)
		}
		_ = os.Remove(ep.Path) // stale: its session is gone
	}
	return nil
}

// answers reports whether ep's process is alive and accepts connections.
func answers(ep Endpoint) bool {
	if !alive(ep.PID) {
		return false
	}
	c, err := net.DialTimeout("unix", ep.Path, probeTimeout)
	if err != nil {
		return !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT)
	}
	c.Close()
	return true
}

// service adapts a Handler to the generated server interface.
type service struct {
	ctlpb.UnimplementedControlServer
	h Handler
}

func (s *service) Info(context.Context, *ctlpb.InfoRequest) (*ctlpb.InfoResponse, error) {
	in := s.h.Info()
	r := &ctlpb.InfoResponse{
		ProtocolVersion: ProtocolVersion, Name: in.Name, Pid: int64(os.Getpid()),
		UptimeMs: time.Since(in.Start).Milliseconds(), Losses: in.Losses, BytesIn: in.BytesIn, RingOverwrites: in.RingOverwrites,
		SnapshotsTaken: in.SnapshotsTaken, SnapshotsFailed: in.SnapshotsFailed, SnapshotsRefused: in.SnapshotsRefused,
		ConfigPath: in.ConfigPath, MemoryBytes: in.MemoryBytes,
	}
	for _, b := range in.Buffers {
		r.Buffers = append(r.Buffers, &ctlpb.BufferInfo{Name: b.Name, Size: b.Size, Fill: b.Fill})
	}
	return r, nil
}

func (s *service) Trigger(_ context.Context, req *ctlpb.TriggerRequest) (*ctlpb.TriggerResponse, error) {
	if err := ValidateTrigger(req); err != nil {
		return nil, errf(codes.InvalidArgument, "%v", err)
	}
	if tn, ok := s.h.(TriggerNamer); ok {
		if err := unknownTriggers(req.GetNames(), tn.TriggerNames()); err != nil {
			return nil, errf(codes.NotFound, "%v", err)
		}
	}
	acted, ignored := s.h.Trigger(req.GetNames())
	return &ctlpb.TriggerResponse{Acted: acted, Ignored: uint32(ignored)}, nil
}

func (s *service) Snapshot(ctx context.Context, req *ctlpb.SnapshotRequest) (*ctlpb.SnapshotResponse, error) {
	if err := ValidateSnapshot(req); err != nil {
		return nil, errf(codes.InvalidArgument, "%v", err)
	}
	r, err := s.h.Snapshot(ctx, req.GetPath(), req.GetTrigger())
	if err != nil {
		return nil, errf(codes.Unavailable, "%v", err)
	}
	return &ctlpb.SnapshotResponse{Files: r.Files, Packets: r.Packets, Bytes: r.Bytes,
		PauseUs: r.Pause.Microseconds(), Number: uint32(r.Number)}, nil
}

func (s *service) Rotate(context.Context, *ctlpb.RotateRequest) (*ctlpb.RotateResponse, error) {
	closed, err := s.h.Rotate()
	if err != nil {
		return nil, errf(codes.FailedPrecondition, "%v", err)
	}
	return &ctlpb.RotateResponse{Closed: closed}, nil
}

func (s *service) Stop(context.Context, *ctlpb.StopRequest) (*ctlpb.StopResponse, error) {
	s.h.Stop()
	return &ctlpb.StopResponse{}, nil
}

// ValidateTrigger checks a decoded Trigger request.
func ValidateTrigger(req *ctlpb.TriggerRequest) error {
	n := req.GetNames()
	if len(n) == 0 {
		return errors.New("trigger: no names")
	}
	if len(n) > MaxTriggers {
		return fmt.Errorf("trigger: %d names; the limit is %d", len(n), MaxTriggers)
	}
	for i, name := range n {
		if err := ValidName("trigger", name); err != nil {
			return fmt.Errorf("trigger: names[%d]: %w", i, err)
		}
	}
	return nil
}

// ValidateSnapshot checks a decoded Snapshot request.
func ValidateSnapshot(req *ctlpb.SnapshotRequest) error {
	if len(req.GetPath()) > maxPathLen {
		return fmt.Errorf("snapshot: path is %d bytes; the limit is %d", len(req.GetPath()), maxPathLen)
	}
	if p := req.GetPath(); p != "" && !filepath.IsAbs(p) {
		return fmt.Errorf("snapshot: path %q is relative; the session's working directory is not the client's", p)
	}
	if t := req.GetTrigger(); t != "" {
		if err := ValidName("trigger", t); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// unknownTriggers returns an error naming the names that are not in known.
func unknownTriggers(names, known []string) error {
	var bad []string
	for _, n := range names {
		if q := strconv.Quote(n); !slices.Contains(known, n) && !slices.Contains(bad, q) {
			bad = append(bad, q)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if len(known) == 0 {
		return fmt.Errorf("unknown trigger %s: the session has no trigger_config triggers", strings.Join(bad, ", "))
	}
	return fmt.Errorf("unknown trigger %s: the session's triggers are %s (nothing was activated)", strings.Join(bad, ", "), strings.Join(known, ", "))
}
