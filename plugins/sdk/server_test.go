package sdk

import (
	"context"
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
	"google.golang.org/protobuf/types/known/structpb"

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
	srv *server
	rpc wire.DataSourceClient
	shm *smb.SMB // the "host" mapping
	src *fakeSource
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
	r.srv = newServer(map[string]Source{
		"fake": {Name: "fake", Description: "a fake", ConfigKeys: []ConfigKey{{Name: "fail", Type: "string"}}, Factory: func(cfg map[string]any) (plugins.DataSource, error) {
			if v, ok := cfg["fail"]; ok {
				return nil, errors.New("fail: " + v.(string) + "\nother.key: also bad")
			}
			return r.src, nil
		}},
		"other": {Name: "other", Factory: func(map[string]any) (plugins.DataSource, error) { panic("boom") }},
	}, hclog.NewNullLogger())
	r.srv.smbFd = fd
	t.Cleanup(func() {
		if r.srv.shm == nil {
			unix.Close(fd)
		}
	})
	conn, gs := plugin.TestGRPCConn(t, func(s *grpc.Server) { wire.RegisterDataSourceServer(s, r.srv) })
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	r.rpc = wire.NewDataSourceClient(conn)
	return r
}

// setup calls Setup; config problems come back as an error listing them.
func (r *rig) setup(req *wire.SetupRequest) error {
	resp, err := r.rpc.Setup(context.Background(), req)
	if err != nil {
		return err
	}
	if len(resp.GetProblems()) > 0 {
		var msgs []string
		for _, p := range resp.GetProblems() {
			msgs = append(msgs, p.GetPath()+": "+p.GetMessage())
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

func (r *rig) start() error {
	_, err := r.rpc.Start(context.Background(), &wire.StartRequest{})
	return err
}

func (r *rig) stop() error {
	_, err := r.rpc.Stop(context.Background(), &wire.StopRequest{})
	return err
}

func (r *rig) clear() error {
	_, err := r.rpc.ClearIncrementalState(context.Background(), &wire.ClearIncrementalStateRequest{})
	return err
}

func (r *rig) goodSetup() *wire.SetupRequest {
	return &wire.SetupRequest{Name: "fake", PageSize: uint32(r.shm.PageSize()), SmbSize: uint32(r.shm.Size()), TargetBuffer: 2, Policy: wire.BufferExhaustedPolicy_BUFFER_EXHAUSTED_POLICY_STALL}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
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
		{"factory error", func(q *wire.SetupRequest) { q.Config = mustStruct(t, map[string]any{"fail": "x"}) }, codes.Unknown, `fail: x; other.key: also bad`},
		{"factory panic", func(q *wire.SetupRequest) { q.Name = "other" }, codes.Unknown, `: the data source's factory panicked: boom`},
		{"size mismatch", func(q *wire.SetupRequest) { q.SmbSize *= 2 }, codes.InvalidArgument, "host announced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "size mismatch" {
				// Mapping happens last; a failed mapping closes the fd, so
				// this case runs on its own rig.
				r = newRig(t, 0)
			}
			q := r.goodSetup()
			tc.mod(q)
			err := r.setup(q)
			if err == nil || status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.code, tc.want)
			}
		})
	}
	if err := newRig(t, 0).start(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Start before Setup: %v, want FailedPrecondition", err)
	}
	if err := newRig(t, 0).clear(); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("ClearIncrementalState before Setup: %v, want FailedPrecondition", err)
	}
}

// Validate runs the factory only and reports its problems with paths;
// Describe lists what the plugin serves.
func TestValidateAndDescribe(t *testing.T) {
	r := newRig(t, 0)
	ctx := context.Background()
	resp, err := r.rpc.Validate(ctx, &wire.ValidateRequest{Name: "fake", Config: mustStruct(t, map[string]any{"fail": "bad value"})})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range resp.GetProblems() {
		got = append(got, p.GetPath()+"="+p.GetMessage())
	}
	if strings.Join(got, ",") != "fail=bad value,other.key=also bad" {
		t.Fatalf("problems %q", got)
	}
	resp, err = r.rpc.Validate(ctx, &wire.ValidateRequest{Name: "fake"})
	if err != nil || len(resp.GetProblems()) != 0 || resp.GetUnknownDataSource() {
		t.Fatalf("good config: %v %v", resp, err)
	}
	if r.srv.rt != nil || r.srv.state != stateNew {
		t.Fatal("Validate set the data source up")
	}
	resp, err = r.rpc.Validate(ctx, &wire.ValidateRequest{Name: "nope"})
	if err != nil || !resp.GetUnknownDataSource() {
		t.Fatalf("unknown name: %v %v", resp, err)
	}
	d, err := r.rpc.Describe(ctx, &wire.DescribeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.GetDataSources()) != 2 || d.GetDataSources()[0].GetName() != "fake" || d.GetDataSources()[0].GetDescription() != "a fake" ||
		len(d.GetDataSources()[0].GetConfigKeys()) != 1 || d.GetDataSources()[1].GetName() != "other" {
		t.Fatalf("describe: %v", d)
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
	stream, err := r.rpc.Commits(ctx, &wire.CommitsRequest{})
	if err != nil {
		t.Fatal(err)
	}

	// The host side: one goroutine reading commits and freeing chunks.
	type result struct {
		packets, flushAck, done int
		err                     error
	}
	res := make(chan result, 1)
	reader := smb.NewReader(r.shm)
	go func() {
		var out result
		var cd smb.CommitData
		for {
			m, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					out.err = err
				}
				res <- out
				return
			}
			if m.GetDone() != nil {
				out.done++
				continue
			}
			if err := cd.Unmarshal(m.GetCommitData()); err != nil {
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

	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	if err := r.start(); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("second Start: %v, want FailedPrecondition", err)
	}
	<-r.src.done
	if _, err := r.rpc.Flush(context.Background(), &wire.FlushRequest{FlushRequestId: 9}); err != nil {
		t.Fatal(err)
	}
	if err := r.clear(); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	select {
	case out := <-res:
		if out.err != nil {
			t.Fatal(out.err)
		}
		// Small packets never span chunks: one fragment each.
		if out.packets != n || out.flushAck != 1 || out.done != 1 {
			t.Fatalf("read %d packets, %d acks of flush 9 and %d DataSourceDone, want %d, 1 and 1", out.packets, out.flushAck, out.done, n)
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

// Done makes fakeSource plugins.Finite: the SDK forwards it as
// DataSourceDone on the Commits stream.
func (f *fakeSource) Done() <-chan struct{} { return f.done }
