package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// withholdingProxy forwards relay connections to addr, dropping the batch
// frames whose number drop says (the receiver's cumulative ack of a later
// batch then acknowledges them to the sender, as if a hop had lost them).
func withholdingProxy(t *testing.T, addr string, drop func(seq uint64) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(c, up); c.Close() }()
			go func() {
				defer wg.Done()
				defer up.Close()
				var hdr [5]byte
				for {
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					p := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
					if _, err := io.ReadFull(c, p); err != nil {
						return
					}
					if hdr[0] == rawBatch && len(p) >= 8 && drop(binary.BigEndian.Uint64(p)) {
						continue
					}
					if _, err := up.Write(append(hdr[:], p...)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// statsOf runs `stats --fail-on-loss` on a file.
func statsOf(t *testing.T, file string) (out string, code int) {
	t.Helper()
	stdout, stderr, code := runCLI(t, "stats", "--fail-on-loss", file)
	return stdout + stderr, code
}

// Relay batches lost between sender and serve (a proxy withholds batches
// 3 and 4): serve writes the gap into the received trace, and stats
// --fail-on-loss on it exits 3 naming the missing batches.
func TestServeRelayGapReachesStats(t *testing.T) {
	out := t.TempDir()
	addr, stop := startServe(t, serveFlags{listen: "127.0.0.1:0", out: out})
	proxy := withholdingProxy(t, addr, func(seq uint64) bool { return seq == 3 || seq == 4 })
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    relay:\n      address: %s\n      hostname: gappy\n      batch_size: 64KiB\n", proxy))
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	stop()
	got := onlyTrace(t, out)
	msg, code := statsOf(t, got)
	if code != exitDataLoss {
		t.Fatalf("stats --fail-on-loss on the received file: exit %d, want %d\n%s", code, exitDataLoss, msg)
	}
	for _, want := range []string{"serve.batches_missing=2", "batches 3-4", "gappy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stats does not say %q:\n%s", want, msg)
		}
	}
	checkOut, _, code := runCLI(t, "check", got)
	if code != exitDataLoss || !strings.Contains(checkOut, "received_batches_missing") || !strings.Contains(checkOut, "batches 3-4") {
		t.Errorf("check on the received file: exit %d\n%s", code, checkOut)
	}
}

// NATS messages removed from the stream (as retention or limits do,
// here with $JS.API.STREAM.MSG.DELETE): serve --from-nats writes the gap
// into the received trace, and stats --fail-on-loss exits 3 naming it.
func TestServeNATSDeletedMessagesReachStats(t *testing.T) {
	url := startNATSServer(t)
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: nats\n    nats:\n      url: %s\n      subject: traces.gap\n      create_stream: true\n", url))
	if _, stderr, code := runCLI(t, "run", "-c", cfg); code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name, err := js.StreamNameBySubject(ctx, "traces.gap")
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < 10 {
		t.Fatalf("the stream holds %d messages: too few to delete from the middle", info.State.Msgs)
	}
	for seq := uint64(5); seq <= 8; seq++ {
		if err := stream.DeleteMsg(ctx, seq); err != nil {
			t.Fatalf("deleting message %d: %v", seq, err)
		}
	}
	out := t.TempDir()
	metricsAddr := freeLoopbackAddr(t)
	_, stop := startServe(t, serveFlags{natsURL: url, subject: "traces.gap", durable: "gap-test", out: out, metricsAddr: metricsAddr})
	want := fmt.Sprintf("tracepipe_serve_batches_total %d\n", info.State.Msgs-4)
	waitUntil(t, "serve stored every message left (the reader gives up on the gap after its hold timeout)", 40*time.Second, func() bool {
		b := scrapeMaybe(metricsAddr)
		return strings.Contains(b, want) && !strings.Contains(b, "tracepipe_serve_batches_missing_total 0\n")
	})
	stop()
	msg, code := statsOf(t, onlyTrace(t, out))
	if code != exitDataLoss {
		t.Fatalf("stats --fail-on-loss on the received file: exit %d, want %d\n%s", code, exitDataLoss, msg)
	}
	for _, want := range []string{"serve.batches_missing=4", "batches 5-8"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stats does not say %q:\n%s", want, msg)
		}
	}
}

// A receiver killed (SIGKILL) mid-session and started again on the same
// --out loses nothing: the received trace holds the sender's packets, and
// the receiver's own account in it records no loss (no serve.* loss row,
// no gap), so stats judges it as it judges the sender's own counters.
func TestServeKilledAndRestartedRecordsNoLoss(t *testing.T) {
	out := t.TempDir()
	addr := freeLoopbackAddr(t)
	child, stderr := startCLI(t, "serve", "--listen", addr, "--out", out)
	waitUntil(t, "serve listening", 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	file := filepath.Join(t.TempDir(), "local.pftrace")
	cfg := sessionConfig(t, file, fmt.Sprintf("  - type: relay\n    relay:\n      address: %s\n      hostname: survivor\n      backoff_max: 50ms\n      max_batches: 4096\n", addr))
	done := make(chan string, 1)
	go func() {
		_, errOut, code := runCLI(t, "run", "-c", cfg, "--duration", "3s",
			"--set", "data_sources[0].config.max_packets=0", "--set", "data_sources[0].config.rate=3000")
		done <- fmt.Sprintf("exit %d: %s", code, errOut)
	}()
	waitUntil(t, "a received trace growing", 20*time.Second, func() bool {
		names, _ := filepath.Glob(filepath.Join(out, "*.pftrace"))
		if len(names) != 1 {
			return false
		}
		fi, err := os.Stat(names[0])
		return err == nil && fi.Size() > 64<<10
	})
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = waitExit(t, child)
	if !strings.Contains(stderr.String(), "started") {
		t.Errorf("the first serve logged no session start:\n%s", stderr.String())
	}
	child2, stderr2 := startCLI(t, "serve", "--listen", addr, "--out", out)
	res := <-done
	if err := child2.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, child2); code != 0 {
		t.Fatalf("the restarted serve exited %d\n%s", code, stderr2.String())
	}
	comparePackets(t, file, onlyTrace(t, out))
	msg, _ := statsOf(t, onlyTrace(t, out))
	for _, bad := range []string{"serve.batches_missing=", "serve.batches_refused=", "MISSING", "REFUSED"} {
		if strings.Contains(msg, bad) {
			t.Errorf("the received trace records receiver loss (%s) although nothing was lost:\n%s", bad, msg)
		}
	}
	if !strings.Contains(msg, "serve stored") {
		t.Errorf("stats does not show the receiver's account:\n%s", msg)
	}
	if checkOut, _, code := runCLI(t, "check", onlyTrace(t, out)); code != exitOK {
		t.Errorf("check on the received trace: exit %d\n%s", code, checkOut)
	}
	t.Logf("run: %s", res)
}
