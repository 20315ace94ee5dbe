package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/control/internal/ctlpb"
)

type fakeSession struct {
	mu       sync.Mutex
	triggers []string
	stopped  bool
}

func (f *fakeSession) Info() Info {
	return Info{Name: "x", Start: time.Now().Add(-time.Second), Buffers: []BufferInfo{{Name: "ring", Size: 4096, Fill: 0.5}}, Losses: 3, MemoryBytes: 1 << 20}
}

func (f *fakeSession) Trigger(names []string) ([]string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.triggers = append(f.triggers, names...)
	return names[:1], len(names) - 1
}

func (f *fakeSession) Snapshot(_ context.Context, path, trigger string) (SnapshotResult, error) {
	if path == "/fail" {
		return SnapshotResult{}, errors.New("disk full")
	}
	return SnapshotResult{Number: 1, Files: []string{path + trigger}}, nil
}

func (f *fakeSession) Rotate() ([]string, error) { return []string{"a.pftrace"}, nil }

func (f *fakeSession) Stop() {
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
}

func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "tpctl") // t.TempDir can exceed a socket path's 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestServeCommandsAndSocketMode(t *testing.T) {
	dir := shortDir(t)
	f := &fakeSession{}
	srv, err := Listen(dir, "flight", f)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(srv.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v; want a socket with 0600", fi.Mode())
	}
	ep, err := Find(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, sel := range []string{"flight", fmt.Sprint(os.Getpid())} {
		if e, err := Find(dir, sel); err != nil || e != ep {
			t.Fatalf("Find(%q) = %v, %v", sel, e, err)
		}
	}
	c, err := Dial(ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if in.GetName() != "x" || in.GetPid() != int64(os.Getpid()) || len(in.GetBuffers()) != 1 || in.GetLosses() != 3 || in.GetUptimeMs() < 1000 || in.GetMemoryBytes() != 1<<20 {
		t.Fatalf("info %v", in)
	}
	tr, err := c.Trigger(ctx(t), []string{"a", "b"})
	if err != nil || len(tr.GetActed()) != 1 || tr.GetIgnored() != 1 {
		t.Fatalf("trigger %v %v", tr, err)
	}
	sr, err := c.Snapshot(ctx(t), "/tmp/s", "t1")
	if err != nil || sr.GetFiles()[0] != "/tmp/st1" {
		t.Fatalf("snapshot %v %v", sr, err)
	}
	if _, err := c.Snapshot(ctx(t), "/fail", ""); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("failed snapshot: %v", err)
	}
	if _, err := c.Rotate(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx(t)); err != nil || !f.stopped {
		t.Fatalf("stop: %v, stopped %v", err, f.stopped)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(srv.Path()); !os.IsNotExist(err) {
		t.Fatalf("socket still there after Close: %v", err)
	}
}

func TestBadRequestsGetErrors(t *testing.T) {
	dir := shortDir(t)
	srv, err := Listen(dir, "", &fakeSession{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ep, _ := Find(dir, "")
	c, err := Dial(ep)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cases := map[string]struct {
		call func() error
		code codes.Code
	}{
		"no names":      {func() error { _, err := c.Trigger(ctx(t), nil); return err }, codes.InvalidArgument},
		"bad name":      {func() error { _, err := c.Trigger(ctx(t), []string{"a b"}); return err }, codes.InvalidArgument},
		"many names":    {func() error { _, err := c.Trigger(ctx(t), make([]string, MaxTriggers+1)); return err }, codes.InvalidArgument},
		"relative path": {func() error { _, err := c.Snapshot(ctx(t), "x.pftrace", ""); return err }, codes.InvalidArgument},
		"oversized": {func() error {
			_, err := c.Trigger(ctx(t), []string{strings.Repeat("a", MaxRequestBytes+1)})
			return err
		}, codes.ResourceExhausted},
		"malformed": {func() error { return rawCall(t, ep, "/tracepipe.control.v1.Control/Trigger", []byte{0x0a, 0xff, 0xff}) }, codes.Internal},
	}
	for name, tc := range cases {
		if err := tc.call(); status.Code(err) != tc.code {
			t.Errorf("%s: %v; want code %v", name, err, tc.code)
		}
	}
	if _, err := c.Info(ctx(t)); err != nil {
		t.Fatalf("the server no longer answers after bad requests: %v", err)
	}
}

// rawCodec sends bytes as they are.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

func rawCall(t *testing.T, ep Endpoint, method string, body []byte) error {
	conn, err := grpc.NewClient("unix://"+ep.Path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []byte
	return conn.Invoke(ctx(t), method, &body, &out, grpc.ForceCodec(rawCodec{}))
}

// deadPID returns the pid of a process that has exited.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// leaveSocket creates a socket file at path that nothing serves.
func leaveSocket(t *testing.T, path string) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
}

func TestStaleSocketReplacedAndNamesUnique(t *testing.T) {
	dir := shortDir(t)
	stale := filepath.Join(dir, socketName("flight", deadPID(t)))
	leaveSocket(t, stale)
	if eps, _ := List(dir); len(eps) != 0 {
		t.Fatalf("List shows a dead session: %v", eps)
	}
	srv, err := Listen(dir, "flight", &fakeSession{})
	if err != nil {
		t.Fatalf("a dead session's socket blocked the name: %v", err)
	}
	defer srv.Close()
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale socket not removed: %v", err)
	}
	if _, err := Listen(dir, "flight", &fakeSession{}); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("a second session with a live name: %v; want ErrNameTaken", err)
	}
	other, err := Listen(dir, "other", &fakeSession{})
	if err != nil {
		t.Fatalf("a second session with another name: %v", err)
	}
	defer other.Close()
	if _, err := Find(dir, ""); err == nil || !strings.Contains(err.Error(), "--session") {
		t.Fatalf("Find with two sessions: %v; want a request to choose", err)
	}
	if ep, err := Find(dir, "other"); err != nil || ep.Path != other.Path() {
		t.Fatalf("Find(other) = %v, %v", ep, err)
	}
	if _, err := Listen(dir, "bad name", &fakeSession{}); err == nil {
		t.Fatal("an invalid session name was accepted")
	}
}

func TestDirIsPrivate(t *testing.T) {
	x := shortDir(t)
	t.Setenv("XDG_RUNTIME_DIR", x)
	d, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d)
	if err != nil || d != filepath.Join(x, "tracepipe") || fi.Mode().Perm() != 0o700 {
		t.Fatalf("Dir %s: %v %v", d, fi.Mode(), err)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	d, err = Dir()
	if err != nil || !strings.HasPrefix(d, os.TempDir()) || !strings.Contains(d, fmt.Sprint(os.Getuid())) {
		t.Fatalf("Dir without XDG_RUNTIME_DIR: %s %v", d, err)
	}
}

// FuzzDecodeRequest: request bytes from any local process are decoded
// and validated without panic; what validates re-encodes.
func FuzzDecodeRequest(f *testing.F) {
	for _, m := range []proto.Message{
		&ctlpb.TriggerRequest{Names: []string{"slow_frame", "oom"}},
		&ctlpb.SnapshotRequest{Path: "/tmp/x.pftrace", Trigger: "t"},
		&ctlpb.TriggerRequest{Names: []string{"a b"}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var tr ctlpb.TriggerRequest
		if proto.Unmarshal(b, &tr) == nil && ValidateTrigger(&tr) == nil {
			if _, err := proto.Marshal(&tr); err != nil {
				t.Fatal(err)
			}
			for _, n := range tr.GetNames() {
				if ValidName("trigger", n) != nil {
					t.Fatalf("accepted name %q", n)
				}
			}
		}
		var sr ctlpb.SnapshotRequest
		if proto.Unmarshal(b, &sr) == nil && ValidateSnapshot(&sr) == nil {
			if p := sr.GetPath(); p != "" && !filepath.IsAbs(p) {
				t.Fatalf("accepted relative path %q", p)
			}
		}
	})
}
