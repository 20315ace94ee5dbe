package control

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tracepipe/tracepipe/control/internal/ctlpb"
	"github.com/tracepipe/tracepipe/internal/names"
)

// ProtocolVersion is the control protocol's version (Info.protocol_version).
const ProtocolVersion = 1

// Limits on requests (untrusted: any process of the user may connect).
const (
	MaxRequestBytes = 64 << 10
	MaxTriggers     = 64           // names per Trigger request
	MaxNameLen      = names.MaxLen // session and trigger names
	maxPathLen      = 4096
)

// probeTimeout bounds the check of whether an existing socket is alive.
const probeTimeout = time.Second

// ErrNameTaken is returned by Listen when a live session already uses the
// name (unique_session_name).
var ErrNameTaken = errors.New("control: a running session already has this name")

// ValidName checks a session or trigger name by the rule the config
// applies too (package names).
func ValidName(kind, s string) error { return names.Valid(kind, s) }

// Dir is where the sockets live: $XDG_RUNTIME_DIR/tracepipe, else
// tracepipe-<uid> under the temp dir. It is created with mode 0700 and
// must belong to the user.
func Dir() (string, error) {
	d := ""
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		d = filepath.Join(x, "tracepipe")
	} else {
		d = filepath.Join(os.TempDir(), fmt.Sprintf("tracepipe-%d", os.Getuid()))
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("control: %w", err)
	}
	fi, err := os.Lstat(d)
	if err != nil {
		return "", fmt.Errorf("control: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || ok && int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("control: %s is not a directory of this user", d)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d, 0o700); err != nil {
			return "", fmt.Errorf("control: %w", err)
		}
	}
	return d, nil
}

// Endpoint is one session's socket.
type Endpoint struct {
	Path string
	Name string // "" for an unnamed session
	PID  int
}

// unnamed is the name part of an unnamed session's socket.
const unnamed = "-"

func socketName(name string, pid int) string {
	if name == "" {
		name = unnamed
	}
	return fmt.Sprintf("%s.%d.sock", name, pid)
}

// parseSocket reads "<name>.<pid>.sock".
func parseSocket(dir, base string) (Endpoint, bool) {
	rest, ok := strings.CutSuffix(base, ".sock")
	if !ok {
		return Endpoint{}, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return Endpoint{}, false
	}
	pid, err := strconv.Atoi(rest[i+1:])
	if err != nil || pid <= 0 {
		return Endpoint{}, false
	}
	name := rest[:i]
	if name == unnamed {
		name = ""
	}
	return Endpoint{Path: filepath.Join(dir, base), Name: name, PID: pid}, true
}

// List returns the sessions with a socket in dir whose process is alive.
func List(dir string) ([]Endpoint, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Endpoint
	for _, e := range ents {
		ep, ok := parseSocket(dir, e.Name())
		if ok && alive(ep.PID) {
			out = append(out, ep)
		}
	}
	return out, nil
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Find picks the session sel names (a name or a pid); "" picks the only
// running one.
func Find(dir, sel string) (Endpoint, error) {
	eps, err := List(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return Endpoint{}, err
	}
	var match []Endpoint
	for _, ep := range eps {
		if sel == "" || ep.Name == sel || strconv.Itoa(ep.PID) == sel {
			match = append(match, ep)
		}
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) == 0 && sel == "":
		return Endpoint{}, fmt.Errorf("no running tracepipe session (looked in %s)", dir)
	case len(match) == 0:
		return Endpoint{}, fmt.Errorf("no running tracepipe session named or with pid %q (see tracepipe sessions)", sel)
	}
	var names []string
	for _, ep := range match {
		names = append(names, ep.label())
	}
	return Endpoint{}, fmt.Errorf("%d sessions are running (%s): choose one with --session NAME|PID", len(match), strings.Join(names, ", "))
}

func (ep Endpoint) label() string {
	if ep.Name == "" {
		return strconv.Itoa(ep.PID)
	}
	return fmt.Sprintf("%s (pid %d)", ep.Name, ep.PID)
}

// Client is a connection to one session.
type Client struct {
	conn *grpc.ClientConn
	c    ctlpb.ControlClient
}

// Dial connects to ep.
func Dial(ep Endpoint) (*Client, error) {
	conn, err := grpc.NewClient("unix://"+ep.Path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("control: %s: %w", ep.Path, err)
	}
	return &Client{conn: conn, c: ctlpb.NewControlClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Info asks the session to describe itself and checks the protocol version.
func (c *Client) Info(ctx context.Context) (*ctlpb.InfoResponse, error) {
	r, err := c.c.Info(ctx, &ctlpb.InfoRequest{})
	if err != nil {
		return nil, err
	}
	if r.GetProtocolVersion() != ProtocolVersion {
		return nil, fmt.Errorf("control: the session speaks protocol version %d, this tracepipe %d", r.GetProtocolVersion(), ProtocolVersion)
	}
	return r, nil
}

// Trigger activates triggers.
func (c *Client) Trigger(ctx context.Context, names []string) (*ctlpb.TriggerResponse, error) {
	return c.c.Trigger(ctx, &ctlpb.TriggerRequest{Names: names})
}

// Snapshot takes a snapshot now.
func (c *Client) Snapshot(ctx context.Context, path, trigger string) (*ctlpb.SnapshotResponse, error) {
	return c.c.Snapshot(ctx, &ctlpb.SnapshotRequest{Path: path, Trigger: trigger})
}

// Rotate rotates the session's files.
func (c *Client) Rotate(ctx context.Context) (*ctlpb.RotateResponse, error) {
	return c.c.Rotate(ctx, &ctlpb.RotateRequest{})
}

// Stop stops the session.
func (c *Client) Stop(ctx context.Context) error {
	_, err := c.c.Stop(ctx, &ctlpb.StopRequest{})
	return err
}

// errf is a gRPC error with a code.
func errf(code codes.Code, format string, args ...any) error {
	return status.Errorf(code, format, args...)
}
