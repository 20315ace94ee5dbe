package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/perfettotest"
)

// The modules tracepiped must not link: what makes `tracepipe` a 40 MB
// program whose package inits alone keep about 19 MiB of it resident
// (issue 27). The test binary holds what main holds, and these tests add
// none of them.
var heavy = []string{
	"google.golang.org/grpc",
	"github.com/hashicorp/go-plugin",
	"cel.dev/cel-go",
	"github.com/prometheus/client_golang",
	"github.com/nats-io/nats.go",
	"github.com/spf13/cobra",
	"golang.org/x/image",
}

func TestLinksNoHeavyModule(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	if len(bi.Deps) == 0 {
		t.Fatal("the build info lists no modules: the test would prove nothing")
	}
	for _, d := range bi.Deps {
		for _, h := range heavy {
			if d.Path == h || strings.HasPrefix(d.Path, h+"/") {
				t.Errorf("tracepiped links %s %s", d.Path, d.Version)
			}
		}
	}
}

// tracepiped serves the ConsumerPort on the socket PERFETTO_CONSUMER_SOCK_NAME
// names, on one thread by default, until its context ends; then it
// removes its sockets, restores GOMAXPROCS and exits 0.
func TestServesPerfettoSockets(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	if procs == 1 {
		runtime.GOMAXPROCS(2) // so that the default shows
		defer runtime.GOMAXPROCS(1)
		procs = 2
	}
	dir := t.TempDir()
	prod, cons := filepath.Join(dir, "p.sock"), filepath.Join(dir, "c.sock")
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", prod)
	t.Setenv("PERFETTO_CONSUMER_SOCK_NAME", cons)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testsupport.LockedBuffer
	code := make(chan int, 1)
	go func() { code <- run(ctx, nil, &stdout, &stderr) }()

	var c *perfettotest.Consumer
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if c, err = perfettotest.Dial(cons, 10*time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer socket never answered: %v; stderr %q", err, stderr.String())
		}
		select {
		case got := <-code:
			t.Fatalf("tracepiped exited %d before serving; stderr %q", got, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer c.Close()
	if n := len(c.Bind.GetMsgBindServiceReply().GetMethods()); n != 15 {
		t.Errorf("ConsumerPort has %d methods, want 15 as traced's", n)
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("tracepiped runs with GOMAXPROCS %d, want 1 by default", got)
	}
	cancel()
	select {
	case got := <-code:
		if got != exitOK {
			t.Fatalf("exit %d, stderr %q", got, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tracepiped did not return within 10 s of its context ending")
	}
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Errorf("GOMAXPROCS %d after tracepiped returned, want %d as before", got, procs)
	}
	for _, s := range []string{prod, cons} {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("stderr %q does not name the socket %s", stderr.String(), s)
		}
		if _, err := os.Stat(s); !os.IsNotExist(err) {
			t.Errorf("socket %s left behind: %v", s, err)
		}
	}
}

// Bad flags are usage errors (exit 2) that name the flag; --help is not.
func TestFlags(t *testing.T) {
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", filepath.Join(t.TempDir(), "never.sock"))
	for _, tc := range []struct {
		args []string
		code int
		out  string // in stdout for exitOK, else in stderr
	}{
		{[]string{"--help"}, exitOK, "--max-consumer-memory"},
		{[]string{"--procs", "-2"}, exitUsage, "--procs -2"},
		{[]string{"--max-consumer-memory", "lots"}, exitUsage, `--max-consumer-memory "lots"`},
		{[]string{"--max-consumer-memory", "0"}, exitUsage, `--max-consumer-memory "0"`},
		{[]string{"--listen", ":1"}, exitUsage, "--listen"},
		{[]string{"serve"}, exitUsage, `"serve"`},
	} {
		var stdout, stderr testsupport.LockedBuffer
		got := run(context.Background(), tc.args, &stdout, &stderr)
		where := stderr.String()
		if tc.code == exitOK {
			where = stdout.String()
		}
		if got != tc.code || !strings.Contains(where, tc.out) {
			t.Errorf("tracepiped %q: exit %d, stdout %q, stderr %q; want exit %d with %q", tc.args, got, stdout.String(), stderr.String(), tc.code, tc.out)
		}
	}
}

// A socket path it cannot listen on is an error naming it (exit 1), not
// a hang.
func TestUnusableSocketIsAnError(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "missing-dir", "p.sock")
	t.Setenv("PERFETTO_PRODUCER_SOCK_NAME", bad)
	t.Setenv("PERFETTO_CONSUMER_SOCK_NAME", filepath.Join(dir, "c.sock"))
	var stdout, stderr testsupport.LockedBuffer
	code := make(chan int, 1)
	go func() { code <- run(context.Background(), nil, &stdout, &stderr) }()
	select {
	case got := <-code:
		if got != exitError || !strings.Contains(stderr.String(), bad) {
			t.Errorf("exit %d, stderr %q; want exit 1 naming %s", got, stderr.String(), bad)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tracepiped kept running without its producer socket")
	}
}
