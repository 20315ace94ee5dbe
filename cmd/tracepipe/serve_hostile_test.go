package main

// The hostile-peer suite: raw connections against a real `tracepipe
// serve` process (the test binary re-executed as the CLI), one test per way
// a peer could hang or exhaust serve. Each asserts that the refusal is
// counted in /metrics, that memory stays bounded, that the peer is cut off
// within a deadline, and that an honest sender running meanwhile gets
// every packet stored. Limits are set small by their flags so the suite
// stays fast.

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/sinks/relay"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// serveChild is a `tracepipe serve` process.
type serveChild struct {
	cmd     *exec.Cmd
	stderr  *testsupport.LockedBuffer
	addr    string // relay listener
	metrics string // metrics listener
	out     string
	merge   bool
	// exitedCh is closed when the process has exited.
	exitedCh chan struct{}
}

// startServeChild starts serve in a child process with a relay listener
// and metrics on free loopback ports, and waits until both answer.
func startServeChild(t *testing.T, merge bool, extra ...string) *serveChild {
	t.Helper()
	sc := &serveChild{addr: freeLoopbackAddr(t), metrics: freeLoopbackAddr(t), out: t.TempDir(), merge: merge, stderr: &testsupport.LockedBuffer{}}
	args := []string{"serve", "--listen", sc.addr, "--out", sc.out, "--metrics-addr", sc.metrics}
	if merge {
		args = append(args, "--merge")
	}
	args = append(args, extra...)
	a, _ := json.Marshal(args)
	sc.cmd = exec.Command(os.Args[0], "-test.run=^$")
	sc.cmd.Env = append(os.Environ(), childArgsEnv+"="+string(a))
	sc.cmd.Stderr = sc.stderr
	if err := sc.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	sc.exitedCh = exited
	go func() { _ = sc.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = sc.cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("serve's log:\n%s", tail(sc.stderr.String(), 40))
		}
	})
	waitUntil(t, "serve answering on its relay and metrics ports", 20*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", sc.addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return scrapeMaybe(sc.metrics) != ""
	})
	return sc
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// metric returns the value of one series of serve's /metrics (name
// without the tracepipe_ prefix, labels as exposed), -1 if absent.
func (sc *serveChild) metric(series string) float64 {
	for _, l := range strings.Split(scrapeMaybe(sc.metrics), "\n") {
		if v, ok := strings.CutPrefix(l, "tracepipe_"+series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// rssBytes is the child's resident set size (VmRSS).
func (sc *serveChild) rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", sc.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// rssSampler records the child's peak RSS until stopped.
func (sc *serveChild) rssSampler(t *testing.T) (peak func() int64) {
	var mu sync.Mutex
	var max int64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", sc.cmd.Process.Pid)); err == nil {
				for _, l := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
						mu.Lock()
						max = maxInt64(max, kb<<10)
						mu.Unlock()
					}
				}
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop)
	return func() int64 {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return max
	}
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// Raw protocol, written here from the frame layout (sinks/relay
// protocol.go) so the suite can send what no real sender would.
const (
	rawHello = 1
	rawBatch = 3
	rawAck   = 4
	rawError = 5
)

func rawFrame(typ byte, payload []byte) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

func rawHelloFrame(machine uint64, session [16]byte, host string) []byte {
	p := []byte("TPRL")
	p = binary.BigEndian.AppendUint16(p, 1)
	p = binary.BigEndian.AppendUint64(p, machine)
	p = append(p, session[:]...)
	p = append(p, byte(len(host)))
	p = append(p, host...)
	return rawFrame(rawHello, p)
}

func rawBatchFrame(seq uint64, records []byte) []byte {
	return rawFrame(rawBatch, append(binary.BigEndian.AppendUint64(nil, seq), records...))
}

// rawConn dials serve and says hello; it fails the test if serve does not
// answer with a hello ack.
func rawConn(t *testing.T, addr string, machine uint64, session [16]byte) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(rawHelloFrame(machine, session, "hostile")); err != nil {
		t.Fatal(err)
	}
	typ, p := readRawFrame(t, c)
	if typ != 2 {
		t.Fatalf("hello answered with frame %d %q", typ, p)
	}
	return c
}

// readRawFrame reads one frame within 20 s.
func readRawFrame(t *testing.T, c net.Conn) (byte, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("reading a frame from serve: %v", err)
	}
	p := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(c, p); err != nil {
		t.Fatalf("reading a frame from serve: %v", err)
	}
	return hdr[0], p
}

// honestPacket is packet n of an honest sender: a timestamp, a track
// event of some bytes, sequence 2.
func honestPacket(n uint64) []byte {
	p := tracefile.AppendTimestamp(nil, n)
	p = wire.AppendBytes(p, tracefile.FieldTrackEvent, make([]byte, 200))
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 7, SequenceID: 2})
}

// honestSender is a real relay sink sending n packets to sc while the
// hostile peers do their worst; wait returns once the sink is closed and
// checks that the received trace holds each packet exactly once.
func honestSender(t *testing.T, sc *serveChild, host string, n int) (wait func()) {
	t.Helper()
	id := remote.NewIdentity(remote.HashMachineID(host), host)
	s, err := relay.New(relay.Options{Address: sc.addr, Identity: id, BatchBytes: 32 << 10, MaxBatches: 1024,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, CloseTimeout: 40 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx := context.Background()
		for i := 0; i < n; i += 100 {
			batch := make([][]byte, 0, 100)
			for j := i; j < min(n, i+100); j++ {
				batch = append(batch, honestPacket(uint64(j)))
			}
			_ = s.Write(ctx, batch)
			time.Sleep(time.Millisecond)
		}
		_ = s.Close(ctx)
	}()
	return func() {
		t.Helper()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: the honest sender did not finish within 60 s", host)
		}
		if st := s.Stats(); st.PacketsWritten != uint64(n) {
			t.Fatalf("%s: %d of %d packets acknowledged (stats %+v)", host, st.PacketsWritten, n, st)
		}
		store, err := remote.OpenStoreOptions(sc.out, remote.StoreOptions{Merge: sc.merge})
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]int, n)
		for _, p := range tracetest.ReadAll(t, store.FileName(id)) {
			info, err := tracefile.DecodePacket(p)
			if err != nil {
				t.Fatal(err)
			}
			if info.Kind() != "track_event" || info.Timestamp >= uint64(n) {
				continue
			}
			seen[info.Timestamp]++
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("%s: packet %d stored %d times", host, i, c)
			}
		}
	}
}

// One batch of a million packets, each on its own sequence id, into
// serve --merge: the sequence cap refuses it (counted), the peer gets an
// error frame naming the limit, nothing of it reaches the merged file, and
// an honest sender is served meanwhile.
func TestServeHostileMillionSequences(t *testing.T) {
	sc := startServeChild(t, true)
	c := rawConn(t, sc.addr, 0xbad, [16]byte{1})
	defer c.Close()
	const ids = 1_000_000
	var recs []byte
	for i := uint32(0); i < ids; i++ {
		recs = tracefile.AppendRecord(recs, tracefile.AppendTrusted(nil, tracefile.Trusted{UID: 1, SequenceID: i + 2}))
	}
	wait := honestSender(t, sc, "honest-a", 20000)
	go func() { _, _ = c.Write(rawBatchFrame(1, recs)) }()
	typ, p := readRawFrame(t, c)
	if typ != rawError || !strings.Contains(string(p), "sequence ids") {
		t.Fatalf("serve answered the batch with frame %d %q, want an error about sequence ids", typ, p)
	}
	waitUntil(t, "the refusal counted", 10*time.Second, func() bool {
		return sc.metric(`serve_refused_total{limit="max_sequences"}`) == 1
	})
	wait()
	if got := sc.metric("serve_packets_total"); got != 20000 {
		t.Fatalf("serve stored %v packets, want only the honest sender's 20000", got)
	}
}

// 60 connections, each a hello and a batch header announcing 16 MiB of
// which all but one byte arrive: the frame memory budget bounds what
// serve holds (gauge and RSS), each peer is cut off by the frame timeout
// or refused for memory (counted), and an honest sender gets through.
func TestServeHostileFramesOneByteShort(t *testing.T) {
	const budget = 32 << 20
	sc := startServeChild(t, false, "--frame-memory", strconv.Itoa(budget), "--frame-timeout", "2s")
	base := sc.rssBytes(t)
	peak := sc.rssSampler(t)
	body := make([]byte, 16<<20-1)
	hdr := rawFrame(rawBatch, nil)
	binary.BigEndian.PutUint32(hdr[1:], 16<<20)
	var wg sync.WaitGroup
	for i := range 60 {
		c := rawConn(t, sc.addr, uint64(1000+i), [16]byte{byte(i)})
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			_, _ = c.Write(hdr)
			_, _ = c.Write(body) // then silence, the last byte never comes
		}()
	}
	wait := honestSender(t, sc, "honest-b", 20000)
	maxGauge := 0.0
	waitUntil(t, "all 60 peers cut off (frame timeout or no memory)", 40*time.Second, func() bool {
		maxGauge = max(maxGauge, sc.metric("serve_frame_memory_bytes"))
		return sc.metric(`serve_timeouts_total{timeout="frame"}`)+sc.metric(`serve_refused_total{limit="frame_memory"}`) >= 60
	})
	wg.Wait()
	wait()
	if maxGauge > budget {
		t.Errorf("frame memory gauge reached %v, over the budget %d", maxGauge, budget)
	}
	// Unbounded, 60 × 16 MiB would be ~1 GB; the budget allows 32 MiB of
	// frames (allow for the race detector's shadow memory, garbage not
	// yet collected and the honest sender's batches on top: under -race
	// the growth measured ~200 MiB).
	p := peak()
	if p-base > 12*budget {
		t.Errorf("serve's RSS grew from %d to %d bytes, more than 12 × the %d-byte frame budget", base, p, budget)
	}
	t.Logf("serve's RSS %d MiB before, peak %d MiB; frame memory gauge peak %.0f MiB", base>>20, p>>20, maxGauge/(1<<20))
	if sc.metric(`serve_timeouts_total{timeout="frame"}`) < 1 {
		t.Error("no frame timeout counted: the peers that got memory held it")
	}
}

// 1,030 connections that say hello and go quiet, with the default idle
// timeout (minutes): at the connection cap the connection idle longest is
// closed to make room (counted) instead of the newcomer being refused, so
// an honest sender arriving meanwhile gets every packet stored; a newcomer
// finding no connection idle long enough is refused (counted).
func TestServeHostileIdleConnections(t *testing.T) {
	sc := startServeChild(t, false)
	peak := sc.rssSampler(t)
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	var wg sync.WaitGroup
	for i := range 1030 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", sc.addr, 10*time.Second)
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_, _ = c.Write(rawHelloFrame(uint64(5000+i), [16]byte{byte(i), byte(i >> 8)}, "idle"))
		}()
	}
	wg.Wait()
	waitUntil(t, "the connection cap hit", 20*time.Second, func() bool {
		return sc.metric(`serve_refused_total{limit="max_conns"}`)+sc.metric("serve_evicted_idle_total") >= 6
	})
	if open := sc.metric("serve_connections"); open < 1000 {
		t.Fatalf("only %v connections held: the test does not fill the cap", open)
	}
	evictedBefore := sc.metric("serve_evicted_idle_total")
	wait := honestSender(t, sc, "honest-c", 20000)
	wait()
	if sc.metric("serve_evicted_idle_total") <= evictedBefore {
		t.Error("the honest sender got in without an idle connection being evicted: the cap was not full")
	}
	p := peak()
	if p > 1<<30 {
		t.Errorf("serve's RSS peaked at %d bytes holding idle connections", p)
	}
	t.Logf("serve's RSS peaked at %d MiB with 1,030 connections", p>>20)
	if names := traceNames(t, sc.out); len(names) != 1 {
		t.Errorf("--out holds %v, want only the honest sender's trace", names)
	}
}

// A sender that sends batches and never reads its acks: serve's ack
// write times out (counted) and the connection ends, instead of blocking
// forever; an honest sender is served meanwhile.
func TestServeHostileNeverReadsAcks(t *testing.T) {
	sc := startServeChild(t, false, "--write-timeout", "1s")
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", sc.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(rawHelloFrame(0xacc, [16]byte{3}, "deaf")); err != nil {
		t.Fatal(err)
	}
	wait := honestSender(t, sc, "honest-d", 20000)
	// Many small batches in large writes; acks pile up unread.
	var buf []byte
	seq := uint64(1)
	w := bufio.NewWriterSize(c, 1<<20)
	ended := make(chan error, 1)
	go func() {
		for {
			buf = buf[:0]
			for range 4096 {
				buf = append(buf, rawBatchFrame(seq, nil)...)
				seq++
			}
			_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
			if _, err := w.Write(buf); err != nil {
				ended <- err
				return
			}
		}
	}()
	waitUntil(t, "the ack write timed out", 50*time.Second, func() bool {
		return sc.metric(`serve_timeouts_total{timeout="write"}`) == 1
	})
	select {
	case <-ended:
	case <-time.After(40 * time.Second):
		t.Fatal("the connection was not closed after the write timeout")
	}
	wait()
}

// A batch numbered 2^64-1 is refused (counted) and does not poison the
// session: its batches 1, 2, 3 are stored and acknowledged afterwards.
func TestServeHostileBatchNumberMax(t *testing.T) {
	sc := startServeChild(t, false)
	session := [16]byte{9, 9}
	c := rawConn(t, sc.addr, 0x64, session)
	if _, err := c.Write(rawBatchFrame(1<<64-1, tracefile.AppendRecord(nil, honestPacket(1)))); err != nil {
		t.Fatal(err)
	}
	if typ, p := readRawFrame(t, c); typ != rawError || !strings.Contains(string(p), "beyond") {
		t.Fatalf("batch 2^64-1 answered with frame %d %q", typ, p)
	}
	c.Close()
	if got := sc.metric(`serve_refused_total{limit="seq_window"}`); got != 1 {
		t.Fatalf("seq_window refusals %v, want 1", got)
	}
	c = rawConn(t, sc.addr, 0x64, session)
	defer c.Close()
	for seq := uint64(1); seq <= 3; seq++ {
		if _, err := c.Write(rawBatchFrame(seq, tracefile.AppendRecord(nil, honestPacket(seq)))); err != nil {
			t.Fatal(err)
		}
		if typ, p := readRawFrame(t, c); typ != rawAck || binary.BigEndian.Uint64(p) != seq {
			t.Fatalf("batch %d answered with frame %d %x", seq, typ, p)
		}
	}
	if sc.metric("serve_duplicate_batches_total") != 0 || sc.metric("serve_batches_total") != 3 {
		t.Fatalf("after the refusal: %v batches stored, %v duplicates", sc.metric("serve_batches_total"), sc.metric("serve_duplicate_batches_total"))
	}
}

// Thousands of hellos that never send a batch make no files, and take no
// slot once gone; an honest sender's trace is the only one in --out.
func TestServeHostileManyHellos(t *testing.T) {
	sc := startServeChild(t, false)
	wait := honestSender(t, sc, "honest-e", 5000)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range 4000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.DialTimeout("tcp", sc.addr, 10*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_, _ = c.Write(rawHelloFrame(uint64(9000+i%50), [16]byte{byte(i), byte(i >> 8), 1}, "hello"))
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			var hdr [5]byte
			_, _ = io.ReadFull(c, hdr[:]) // hello ack (or a refusal)
		}()
	}
	wg.Wait()
	wait()
	waitUntil(t, "every hello's session ended", 20*time.Second, func() bool {
		return sc.metric("serve_streams") == 0
	})
	if names := traceNames(t, sc.out); len(names) != 1 {
		t.Fatalf("--out holds %d trace files after 4000 hellos, want only the honest sender's: %v", len(names), names[:min(len(names), 5)])
	}
	ents, _ := os.ReadDir(sc.out)
	if len(ents) != 2 {
		t.Errorf("--out holds %d files, want the honest trace and its state", len(ents))
	}
}

// SIGTERM while peers hold frames half sent and connections idle: serve
// exits within its shutdown bound, cleanly.
func TestServeHostileSIGTERM(t *testing.T) {
	sc := startServeChild(t, true, "--shutdown-timeout", "3s")
	hdr := rawFrame(rawBatch, nil)
	binary.BigEndian.PutUint32(hdr[1:], 16<<20)
	for i := range 20 {
		c := rawConn(t, sc.addr, uint64(100+i), [16]byte{byte(i)})
		defer c.Close()
		_, _ = c.Write(hdr)
		_, _ = c.Write(make([]byte, 1<<20))
	}
	waitUntil(t, "frames in flight", 10*time.Second, func() bool { return sc.metric("serve_frame_memory_bytes") > 0 })
	start := time.Now()
	if err := sc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sc.exitedCh:
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not exit within 15 s of SIGTERM")
	}
	if code := sc.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM\n%s", code, sc.stderr.String())
	}
	t.Logf("serve stopped %s after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// traceNames lists the .pftrace files in dir.
func traceNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".pftrace") {
			names = append(names, e.Name())
		}
	}
	return names
}
