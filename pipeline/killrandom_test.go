package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/plugins/builtin"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// kill -9 at random moments of a rotating stream (20 runs, or
// $TRACEPIPE_KILL_RUNS: tools/killloop runs many beside a CPU hog): every
// file is readable (only the last one may end inside a record), and per
// sequence the set holds a prefix of what the writer wrote: seq 0, 1, ...,
// k-1, each once.
func TestServiceSIGKILLRandomMomentsRotating(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 10))
	runs := 20
	if v := os.Getenv("TRACEPIPE_KILL_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TRACEPIPE_KILL_RUNS=%q: want a positive number of runs", v)
		}
		runs = n
	}
	for run := range runs {
		dir := t.TempDir()
		out := filepath.Join(dir, "k.pftrace")
		cfgPath := filepath.Join(dir, "kill.yaml")
		cfg := fmt.Sprintf(`
duration: 0s
write_into_file: true
file_write_period: 100ms
buffers: [{size_kb: 16384}]
producers: {smb_size_kb: 2048}
data_sources:
  - name: tracepipe.synthetic
    buffer_exhausted_policy: stall
    config: {writers: 2, rate: 10000, packet_size: 400}
sinks: [{type: file, path: %q, max_file_size: 1MiB}]
`, out)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killChildEnv+"="+cfgPath)
		cmd.Stdout = io.Discard
		var childErr bytes.Buffer // the child's counted losses (killChild)
		cmd.Stderr = &childErr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wait := time.Duration(50+rng.IntN(1500)) * time.Millisecond
		timer := time.NewTimer(wait)
		<-timer.C
		_ = cmd.Process.Kill()
		_ = cmd.Wait()

		files, _ := filepath.Glob(filepath.Join(dir, "k*.pftrace")) // k.pftrace, k.1.pftrace, ...
		files = rotationSorted(out, len(files))
		next := map[uint32]uint64{} // per sequence: the next seq index expected
		packets := 0
		for i, f := range files {
			pkts, err := readAllowTruncated(f)
			if err != nil && !(errors.Is(err, tracefile.ErrTruncated) && i == len(files)-1) {
				t.Fatalf("run %d (killed at %v): %s: %v", run, wait, f, err)
			}
			for j, p := range pkts {
				info, err := tracefile.DecodePacket(p)
				if err != nil {
					t.Fatalf("run %d: %s: %v", run, f, err)
				}
				seq, ok := builtin.SyntheticSeq(p)
				if !ok {
					continue
				}
				if seq != next[info.SequenceID] {
					t.Fatalf("run %d (killed at %v): %s (file %d of %d, packet %d of %d): sequence %d has seq %d, want %d (not a prefix); the child's stderr: %q", run, wait, f, i+1, len(files), j, len(pkts), info.SequenceID, seq, next[info.SequenceID], childErr.String())
				}
				next[info.SequenceID]++
				packets++
			}
		}
		t.Logf("run %d: killed at %v: %d files, %d synthetic packets", run, wait, len(files), packets)
	}
}

// rotationSorted lists a rotating sink's n files in write order.
func rotationSorted(path string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, sinks.FileName(path, i))
	}
	return out
}

// readAllowTruncated reads a trace's packets up to its end or a cut.
func readAllowTruncated(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := tracefile.NewReader(f)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, append([]byte(nil), rec.Packet...))
	}
}
