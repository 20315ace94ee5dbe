package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// registerProducer connects to a producer socket as a Perfetto producer
// would (reference/ipc.md: BindService, InitializeConnection,
// RegisterDataSource) and waits for the registration's reply.
func registerProducer(t *testing.T, sock, producer string, sources ...string) net.Conn {
	t.Helper()
	var c net.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("producer socket never opened: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rid := uint64(0)
	send := func(f *ipc.Frame) uint64 {
		rid++
		f.RequestId = proto.Uint64(rid)
		b, _ := ipc.AppendFrame(nil, f)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		return rid
	}
	invoke := func(method uint32, m proto.Message) uint64 {
		b, _ := proto.Marshal(m)
		return send(&ipc.Frame{Msg: &ipc.Frame_MsgInvokeMethod{MsgInvokeMethod: &ipc.Frame_InvokeMethod{
			ServiceId: proto.Uint32(1), MethodId: proto.Uint32(method), ArgsProto: b, DropReply: proto.Bool(false)}}})
	}
	send(&ipc.Frame{Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ProducerPort")}}})
	// ProducerPort ids: 1 InitializeConnection, 2 RegisterDataSource.
	invoke(1, &ipc.InitializeConnectionRequest{ProducerName: proto.String(producer)})
	last := uint64(0)
	for _, s := range sources {
		last = invoke(2, &ipc.RegisterDataSourceRequest{DataSourceDescriptor: &ipc.DataSourceDescriptor{Name: proto.String(s)}})
	}
	var d ipc.Deserializer
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := d.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f != nil && f.GetRequestId() == last {
			if !f.GetMsgInvokeMethodReply().GetSuccess() {
				t.Fatalf("RegisterDataSource: %v", f)
			}
			return c
		}
		if f != nil {
			continue
		}
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Feed(buf[:n]); err != nil {
			t.Fatal(err)
		}
	}
}

// `tracepipe perfetto-sources` lists what the Perfetto producers
// connected to a running `serve --perfetto` registered, by data source,
// with each producer's name and socket identity.
func TestPerfettoSourcesListsRegisteredDataSources(t *testing.T) {
	dir := t.TempDir()
	prod, cons := filepath.Join(dir, "p.sock"), filepath.Join(dir, "c.sock")
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", prod)
	t.Setenv("PERFETTO_CONSUMER_SOCK_NAME", cons)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- runContext(ctx, []string{"serve", "--perfetto"}, &stdout, &stderr) }()
	defer func() {
		cancel()
		<-code
	}()
	a := registerProducer(t, prod, "app.one", "track_event", "app.custom")
	defer a.Close()
	b := registerProducer(t, prod, "traced_probes_double", "linux.sys_stats", "track_event")
	defer b.Close()

	out, errOut, rc := runCLI(t, "perfetto-sources")
	if rc != exitOK {
		t.Fatalf("exit %d: %s", rc, errOut)
	}
	for _, want := range []string{"2 producers, 3 data sources", "  app.custom\n    app.one (pid ", "  linux.sys_stats\n    traced_probes_double (pid "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if i := strings.Index(out, "  track_event\n"); i < 0 || !strings.Contains(out[i:], "app.one") || !strings.Contains(out[i:], "traced_probes_double") {
		t.Errorf("track_event is not listed with both producers:\n%s", out)
	}
	// Nothing listening: a clear error naming the socket.
	_, errOut, rc = runCLI(t, "perfetto-sources", "--socket", filepath.Join(dir, "none.sock"), "--timeout", "1s")
	if rc == exitOK || !strings.Contains(errOut, "none.sock") {
		t.Fatalf("no server: exit %d, %q", rc, errOut)
	}
}
