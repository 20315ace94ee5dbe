package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// serve --perfetto listens on the sockets the PERFETTO_* variables name
// and answers the ConsumerPort there until its context ends.
func TestServePerfettoAnswersOnConsumerSocket(t *testing.T) {
	dir := t.TempDir()
	cons := filepath.Join(dir, "c.sock")
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", filepath.Join(dir, "p.sock"))
	t.Setenv("PERFETTO_CONSUMER_SOCK_NAME", cons)
	procs := runtime.GOMAXPROCS(0)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	code := make(chan int, 1)
	go func() { code <- runContext(ctx, []string{"serve", "--perfetto", "--procs", "1"}, &stdout, &stderr) }()
	var c net.Conn
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if c, err = net.Dial("unix", cons); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("consumer socket never opened: %v (stderr %q)", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer c.Close()
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("serve --perfetto --procs 1 runs with GOMAXPROCS %d", got)
	}
	frame, _ := ipc.AppendFrame(nil, &ipc.Frame{RequestId: proto.Uint64(1), Msg: &ipc.Frame_MsgBindService{MsgBindService: &ipc.Frame_BindService{ServiceName: proto.String("ConsumerPort")}}})
	if _, err := c.Write(frame); err != nil {
		t.Fatal(err)
	}
	var d ipc.Deserializer
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var f *ipc.Frame
	for f == nil {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Feed(buf[:n]); err != nil {
			t.Fatal(err)
		}
		f, _ = d.Next()
	}
	if r := f.GetMsgBindServiceReply(); !r.GetSuccess() || len(r.GetMethods()) != 15 {
		t.Fatalf("bind reply %v", f)
	}
	cancel()
	if got := <-code; got != exitOK {
		t.Fatalf("exit %d, stderr %q", got, stderr.String())
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after serve returned, want %d as before", got, procs)
	}
	if !strings.Contains(stderr.String(), cons) {
		t.Errorf("stderr %q does not name the consumer socket", stderr.String())
	}
	if _, err := os.Stat(cons); !os.IsNotExist(err) {
		t.Errorf("consumer socket left behind: %v", err)
	}
	if _, _, code := runCLI(t, "serve"); code != exitUsage {
		t.Errorf("serve without --perfetto or --out: exit %d", code)
	}
}

// --procs must not be negative; the error names it.
func TestServePerfettoProcsRefusesNegative(t *testing.T) {
	_, stderr, code := runCLI(t, "serve", "--perfetto", "--procs", "-2")
	if code != exitUsage || !strings.Contains(stderr, "--procs -2") {
		t.Errorf("serve --perfetto --procs -2: exit %d, stderr %q; want a usage error naming --procs", code, stderr)
	}
}
