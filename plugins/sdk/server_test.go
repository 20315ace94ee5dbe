package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/internal/wire"
	"github.com/tracepipe/tracepipe/smb"
)

// fakeSource writes n one-byte-tagged packets from its own goroutine.
type fakeSource struct {
	n       int
	mu      sync.Mutex
	calls   []string
	done    chan struct{}
	started bool
}

func (f *fakeSource) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeSource) Start(h plugins.Host) error {
	f.record("start")
	w, err := h.NewWriter()
	if err != nil {
		return err
	}
	f.started = true
	go func() {
		defer close(f.done)
		for i := range f.n {
			if err := w.WritePacket([]byte{0x08, byte(i)}); err != nil {
				panic(err)
			}
		}
		if err := w.Flush(); err != nil {
			panic(err)
		}
	}()
	return nil
}

func (f *fakeSource) Flush() error { f.record("flush"); return nil }

func (f *fakeSource) ClearIncrementalState() { f.record("clear") }

func (f *fakeSource) Stop() error {
	f.record("stop")
	if f.started {
		<-f.done
	}
	return nil
}

// rig is an in-process sdk server behind a real gRPC connection, with the
// SMB on a memfd instead of fd 3.
type rig struct {
	srv  *server
	conn *grpc.ClientConn
	shm  *smb.SMB // the "host" mapping
	src  *fakeSource
}

func newRig(t *testing.T, n int) *rig {
	t.Helper()
	shm, err := smb.NewMemfdSMB("sdk-test", 32<<10, 4096)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shm.Close() })
	fd, err := unix.FcntlInt(uintptr(shm.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{shm: shm, src: &fakeSource{n: n, done: make(chan struct{})}}
	r.srv = newServer(map[string]plugins.Factory{
		"fake": func(cfg map[string]any) (plugins.DataSource, error) {
			if v, ok := cfg["fail"]; ok {
				return nil, errors.New("fail: " + v.(string))
			}
			return r.src, nil
		},
		"other": func(map[string]any) (plugins.DataSource, error) { return nil, errors.New("unused") },
	}, hclog.NewNullLogger())
	r.srv.smbFd = fd
	t.Cleanup(func() {
		if r.srv.shm == nil {
			unix.Close(fd)
		}
	})
	conn, gs := plugin.TestGRPCConn(t, func(s *grpc.Server) { s.RegisterService(&wire.ServiceDesc, r.srv) })
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	r.conn = conn
	return r
}

func (r *rig) setup(req wire.SetupRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	return r.conn.Invoke(context.Background(), wire.MethodSetup, wrapperspb.Bytes(b), new(emptypb.Empty))
}

func (r *rig) call(method string) error {
	return r.conn.Invoke(context.Background(), method, new(emptypb.Empty), new(emptypb.Empty))
}

func (r *rig) goodSetup() wire.SetupRequest {
	return wire.SetupRequest{Name: "fake", PageSize: uint32(r.shm.PageSize()), SMBSize: uint32(r.shm.Size()), TargetBuffer: 2, Policy: int(smb.Stall)}
}

func TestSetupErrors(t *testing.T) {
	r := newRig(t, 0)
	for _, tc := range []struct {
		name string
		mod  func(*wire.SetupRequest)
		code codes.Code
		want string
	}{
		{"unknown name", func(q *wire.SetupRequest) { q.Name = "nope" }, codes.NotFound, `unknown data source "nope" (this plugin serves: fake, other)`},
		{"bad policy", func(q *wire.SetupRequest) { q.Policy = 9 }, codes.InvalidArgument, "policy 9"},
		{"config not an object", func(q *wire.SetupRequest) { q.Config = json.RawMessage(`[1]`) }, codes.InvalidArgument, "not a JSON object"},
		{"factory error", func(q *wire.SetupRequest) { q.Config = json.RawMessage(`{"fail":"x"}`) }, codes.InvalidArgument, `data source "fake": fail: x`},
		{"size mismatch", func(q *wire.SetupRequest) { q.SMBSize *= 2 }, codes.InvalidArgument, "host announced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "size mismatch" {
				// Mapping happens last; a failed mapping closes the fd, so
				// this case runs on its own rig.
				r = newRig(t, 0)
			}
			q := r.goodSetup()
			tc.mod(&q)
			err := r.setup(q)
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.code, tc.want)
			}
		})
	}
	for _, m := range []string{wire.MethodStart, wire.MethodClearIncrementalState} {
		if err := newRig(t, 0).call(m); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("%s before Setup: %v, want FailedPrecondition", m, err)
		}
	}
}

// TestSession drives a whole session over gRPC and reads the commits as
// the host would.
func TestSession(t *testing.T) {
	const n = 3000
	r := newRig(t, n)
	if err := r.setup(r.goodSetup()); err != nil {
		t.Fatal(err)
	}
	if err := r.setup(r.goodSetup()); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second Setup: %v, want FailedPrecondition", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := r.conn.NewStream(ctx, &wire.CommitsStream, wire.MethodCommits)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(new(emptypb.Empty)); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// The host side: one goroutine reading commits and freeing chunks.
	type result struct {
		packets, flushAck int
		err               error
	}
	res := make(chan result, 1)
	reader := smb.NewReader(r.shm)
	go func() {
		var out result
		var cd smb.CommitData
		for {
			m := new(wrapperspb.BytesValue)
			if err := stream.RecvMsg(m); err != nil {
				if !errors.Is(err, io.EOF) {
					out.err = err
				}
				res <- out
				return
			}
			if err := cd.Unmarshal(m.Value); err != nil {
				out.err = err
				res <- out
				return
			}
			if cd.FlushRequestID == 9 {
				out.flushAck++
			}
			reader.ReadCommit(&cd, func(v *smb.ChunkView) {
				if v.TargetBuffer != 2 {
					out.err = errors.New("wrong target buffer")
				}
				b := v.Payload
				for range v.Fragments {
					size, k := protowire.ConsumeVarint(b)
					if k < 0 || uint64(len(b)-k) < size {
						out.err = errors.New("bad fragment")
						return
					}
					if size > 0 { // zero-length fragments are padding
						out.packets++
					}
					b = b[k+int(size):]
				}
			}, nil)
		}
	}()

	if err := r.call(wire.MethodStart); err != nil {
		t.Fatal(err)
	}
	if err := r.call(wire.MethodStart); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second Start: %v, want FailedPrecondition", err)
	}
	<-r.src.done
	if err := r.conn.Invoke(context.Background(), wire.MethodFlush, wrapperspb.UInt64(9), new(emptypb.Empty)); err != nil {
		t.Fatal(err)
	}
	if err := r.call(wire.MethodClearIncrementalState); err != nil {
		t.Fatal(err)
	}
	if err := r.call(wire.MethodStop); err != nil {
		t.Fatal(err)
	}
	if err := r.call(wire.MethodStop); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	select {
	case out := <-res:
		if out.err != nil {
			t.Fatal(out.err)
		}
		// Small packets never span chunks: one fragment each.
		if out.packets != n || out.flushAck != 1 {
			t.Fatalf("read %d packets and %d acks of flush 9, want %d and 1", out.packets, out.flushAck, n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the commit stream did not end after Stop")
	}
	if got := strings.Join(r.src.calls, ","); got != "start,flush,clear,stop" {
		t.Fatalf("data source calls %s", got)
	}
	if st := reader.Stats(); st.TotalRejected() != 0 {
		t.Fatalf("rejected %d chunks", st.TotalRejected())
	}
	if err := r.srv.Commits(nil, nil); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second Commits stream: %v, want AlreadyExists", err)
	}
}
