package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/perfettotest"
	ipc "github.com/tracepipe/tracepipe/perfettoipc"
)

// serve --perfetto listens on the sockets the PERFETTO_* variables name
// and answers the ConsumerPort there until its context ends. It runs its
// Go code on one thread unless told otherwise.
func TestServePerfettoAnswersOnConsumerSocket(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	if procs == 1 {
		runtime.GOMAXPROCS(2) // so that the default shows
		defer runtime.GOMAXPROCS(1)
		procs = 2
	}
	sp := startServePerfetto(t)
	cons := sp.cons
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("serve --perfetto runs with GOMAXPROCS %d, want 1 by default", got)
	}
	f := sp.bindConsumerPort(t)
	if r := f.GetMsgBindServiceReply(); !r.GetSuccess() || len(r.GetMethods()) != 15 {
		t.Fatalf("bind reply %v", f)
	}
	if got := sp.stop(); got != exitOK {
		t.Fatalf("exit %d, stderr %q", got, sp.stderr.String())
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after serve returned, want %d as before", got, procs)
	}
	if !strings.Contains(sp.stderr.String(), cons) {
		t.Errorf("stderr %q does not name the consumer socket", sp.stderr.String())
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

// servedPerfetto is `tracepipe serve --perfetto` run by startServePerfetto.
type servedPerfetto struct {
	cons   string   // the consumer socket
	conn   net.Conn // a connection to it
	stderr *testsupport.LockedBuffer
	cancel func()
	code   chan int
	once   sync.Once
	exit   int
}

// startServePerfetto runs `serve --perfetto args...` on sockets in a
// temporary directory and returns once its consumer socket accepted a
// connection (bounded). The test's end stops it.
func startServePerfetto(t *testing.T, args ...string) *servedPerfetto {
	t.Helper()
	dir := t.TempDir()
	sp := &servedPerfetto{cons: filepath.Join(dir, "c.sock"), stderr: &testsupport.LockedBuffer{}, code: make(chan int, 1)}
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", filepath.Join(dir, "p.sock"))
	t.Setenv("PERFETTO_CONSUMER_SOCK_NAME", sp.cons)
	ctx, cancel := context.WithCancel(context.Background())
	sp.cancel = cancel
	var stdout testsupport.LockedBuffer
	go func() {
		sp.code <- runContext(ctx, append([]string{"serve", "--perfetto"}, args...), &stdout, sp.stderr)
	}()
	t.Cleanup(func() { sp.stop() })
	testsupport.WaitUntil(t, "the consumer socket", 10*time.Second, func() bool {
		var err error
		sp.conn, err = net.Dial("unix", sp.cons)
		return err == nil
	})
	t.Cleanup(func() { sp.conn.Close() })
	return sp
}

// bindConsumerPort binds the ConsumerPort on sp.conn (request id 1) and
// returns the first frame the service answers with, within 10 s.
func (sp *servedPerfetto) bindConsumerPort(t *testing.T) *ipc.Frame {
	t.Helper()
	f, err := perfettotest.NewConsumer(sp.conn.(*net.UnixConn)).BindConsumerPort(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// stop ends serve and returns its exit code.
func (sp *servedPerfetto) stop() int {
	sp.once.Do(func() {
		sp.cancel()
		sp.exit = <-sp.code
	})
	return sp.exit
}
