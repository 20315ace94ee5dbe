package relay

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tracepipe/tracepipe/internal/testsupport/tracetest"
	"github.com/tracepipe/tracepipe/sinks/remote"
	"github.com/tracepipe/tracepipe/tracefile"
)

// A test binary started with serverEnv set runs a relay server (as a
// separate process that a test can SIGKILL) instead of the tests.
const serverEnv = "TRACEPIPE_RELAY_TEST_SERVER" // addr|dir|merge

func TestMain(m *testing.M) {
	if v := os.Getenv(serverEnv); v != "" {
		os.Exit(childServer(v))
	}
	goleak.VerifyTestMain(m) // fails the run if a goroutine outlived the tests
}

func childServer(spec string) int {
	parts := strings.Split(spec, "|")
	store, err := remote.OpenStore(parts[1], parts[2] == "merge")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ln, err := net.Listen("tcp", parts[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	srv := NewServer(ServerOptions{Store: store})
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startChild runs a server process on addr and waits until it listens.
func startChild(t testing.TB, addr, dir string, merge bool) *exec.Cmd {
	t.Helper()
	mode := "split"
	if merge {
		mode = "merge"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"="+addr+"|"+dir+"|"+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server child: %q, %v", line, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startServer runs an in-process server on a free loopback port.
func startServer(t testing.TB, store *remote.Store, opts ServerOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = store
	srv := NewServer(opts)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// testPacket is a stamped packet of sequence seq whose timestamp is n,
// padded to size bytes.
func testPacket(seq uint32, n uint64, size int) []byte {
	p := tracefile.AppendTimestamp(nil, n)
	pad := size - len(p) - 8
	if pad < 0 {
		pad = 0
	}
	p = append(p, 0x5a) // field 11 (track_event), bytes
	p = appendUvarint(p, uint64(pad))
	for i := 0; i < pad; i++ {
		p = append(p, byte(i))
	}
	return tracefile.AppendTrusted(p, tracefile.Trusted{UID: 7, SequenceID: seq})
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// readPackets decodes every packet of a trace file that a sender wrote:
// the receiver's own packets in a merged file (its clock snapshot and
// system_info, the remote_clock_sync rounds) are left out; receivedPackets
// keeps them.
func readPackets(t testing.TB, name string) []tracefile.PacketInfo {
	t.Helper()
	var out []tracefile.PacketInfo
	for _, p := range receivedPackets(t, name) {
		if !receiverPacket(p) {
			out = append(out, p)
		}
	}
	return out
}

// receiverPacket reports whether a merged file's packet is the receiver's:
// its host packets (no machine_id, sequence 1), remote_clock_sync, and the
// machines' marker packets (no sequence, no payload).
func receiverPacket(p tracefile.PacketInfo) bool {
	return p.PayloadField == tracefile.FieldRemoteClockSync || p.MachineID == 0 && p.SequenceID == 1 ||
		p.SequenceID == 0 && p.PayloadField == 0
}

// receivedPackets decodes every packet of a trace file.
func receivedPackets(t testing.TB, name string) []tracefile.PacketInfo {
	t.Helper()
	pkts := tracetest.ReadTrace(t, name)
	infos := make([]tracefile.PacketInfo, len(pkts))
	for i, p := range pkts {
		infos[i] = p.Info
	}
	return infos
}

func closeSink(t testing.TB, s *Sink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func traceFiles(t testing.TB, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.pftrace"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}
