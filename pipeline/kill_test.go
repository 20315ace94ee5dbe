package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/transport/goplugin"

	"go.uber.org/goleak"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/tracefile"
)

// killChildEnv names the config a re-executed test binary runs as a
// streaming session until it is killed (see TestMain).
const killChildEnv = "TRACEPIPE_TEST_KILL_CHILD_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(killChildEnv); path != "" {
		os.Exit(killChild(path))
	}
	// The sessions of these tests run plugin data sources as `tracepipe
	// run` does (its Options.Plugins).
	testPluginHost = goplugin.Host{}
	// A goroutine outliving the tests (a producer, a read pass, an output
	// writer) fails the run.
	goleak.VerifyTestMain(m)
}

// killChild runs a session and reports on stdout, after every read pass
// the sinks have flushed to the OS, how many packets are in the file.
func killChild(path string) int {
	cfg, err := config.Load(config.LoadOptions{Path: path})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := New(cfg, Options{OnPassWritten: func(pi PassInfo) {
		fmt.Fprintf(os.Stdout, "pass %d packets %d\n", pi.Passes, pi.Packets)
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Every loss the service counts goes to stderr as it happens: a
	// killed child writes no final TraceStats, and a test that finds a
	// gap must be able to tell a counted loss from a silent one.
	done := make(chan struct{})
	go func() {
		var seen uint64
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st := s.Status()
			if st.Losses == seen {
				continue
			}
			seen = st.Losses
			var rows []string
			for _, r := range tracefile.LossReport(st.Stats) {
				if r.Value > 0 && r.Severity == tracefile.SeverityDataLoss {
					rows = append(rows, fmt.Sprintf("%s[%d]=%d", r.Name, r.Index, r.Value))
				}
			}
			fmt.Fprintf(os.Stderr, "counted loss at %v: %s\n", st.Elapsed.Round(time.Millisecond), strings.Join(rows, " "))
		}
	}()
	_, err = s.Run(context.Background())
	close(done)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// A streamed trace survives kill -9: the file parses up to its last
// complete packet and holds at least every packet of the last pass the
// service reported as written.
func TestServiceSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "killed.pftrace")
	cfgPath := filepath.Join(dir, "kill.yaml")
	cfg := fmt.Sprintf(`
duration: 0s
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 8192}]
producers: {smb_size_kb: 2048}
data_sources:
  - name: tracepipe.synthetic
    config: {writers: 2, rate: 20000, packet_size: 512}
sinks: [{type: file, path: %q}]
`, out)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+cfgPath)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var reported uint64
	deadline := time.Now().Add(30 * time.Second)
	for passes := 0; passes < 5; passes++ {
		if !lines.Scan() {
			_ = cmd.Process.Kill()
			t.Fatalf("child ended before 5 passes: %v", lines.Err())
		}
		f := strings.Fields(lines.Text())
		if len(f) != 4 || f[0] != "pass" {
			t.Fatalf("child said %q", lines.Text())
		}
		reported, _ = strconv.ParseUint(f[3], 10, 64)
		if time.Now().After(deadline) {
			t.Fatal("child too slow")
		}
	}
	// Kill in the middle of streaming: the child keeps writing.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := tracefile.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for {
		rec, err := r.Next()
		if errors.Is(err, tracefile.ErrTruncated) {
			t.Logf("file ends with a truncated record after %d packets (allowed: killed mid-write)", n)
			break
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("after %d packets: %v", n, err)
		}
		info, err := tracefile.DecodePacket(rec.Packet)
		if err != nil {
			t.Fatalf("packet %d: %v", n, err)
		}
		if info.SequenceID == 0 || !info.HasTrustedUID {
			t.Fatalf("packet %d has no trusted fields: %+v", n, info)
		}
		n++
	}
	if n < reported {
		t.Fatalf("file holds %d packets, but %d were reported written before the kill", n, reported)
	}
	if reported == 0 {
		t.Fatal("no packet was reported written")
	}
	t.Logf("killed after %d packets reported; file holds %d", reported, n)
}
