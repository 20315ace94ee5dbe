package buffer

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// goldenDir returns a golden folder of ../shared (a failure in CI when it
// is missing, a skip locally).
func goldenDir(t testing.TB, parts ...string) string {
	t.Helper()
	return testsupport.GoldenDir(t, parts...)
}

// scriptStep is one operation line of a golden script and the "  => "
// lines that follow it.
type scriptStep struct {
	line int
	op   string
	want []string
}

func parseScript(t *testing.T, path string) []scriptStep {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []scriptStep
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "  => "):
			if len(steps) == 0 {
				t.Fatalf("%s:%d: result before any operation", path, n)
			}
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, strings.TrimPrefix(l, "  => "))
		case l == "" || strings.HasPrefix(l, "#"):
		default:
			steps = append(steps, scriptStep{line: n, op: l})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return steps
}

// scriptArgs splits "op k=v k=v" into the op and a key map.
func scriptArgs(t *testing.T, op string) (string, map[string]string) {
	fs := strings.Fields(op)
	kv := map[string]string{}
	for _, f := range fs[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("bad token %q in %q", f, op)
		}
		kv[k] = v
	}
	return fs[0], kv
}

func scriptUint(t *testing.T, kv map[string]string, k string) uint64 {
	s, ok := kv[k]
	if !ok {
		t.Fatalf("missing %s=", k)
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		t.Fatalf("bad %s=%q: %v", k, s, err)
	}
	return v
}

func scriptHex(t *testing.T, s string) []byte {
	d, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return d
}

func formatStats(s Stats) string {
	return fmt.Sprintf("buffer_size=%d bytes_written=%d bytes_overwritten=%d bytes_read=%d "+
		"padding_bytes_written=%d padding_bytes_cleared=%d chunks_written=%d chunks_rewritten=%d "+
		"chunks_relocated=%d chunks_overwritten=%d chunks_discarded=%d chunks_read=%d "+
		"chunks_committed_out_of_order=%d write_wrap_count=%d patches_succeeded=%d "+
		"patches_failed=%d readaheads_succeeded=%d readaheads_failed=%d abi_violations=%d "+
		"trace_writer_packet_loss=%d",
		s.BufferSize, s.BytesWritten, s.BytesOverwritten, s.BytesRead, s.PaddingBytesWritten,
		s.PaddingBytesCleared, s.ChunksWritten, s.ChunksRewritten, s.ChunksRelocated,
		s.ChunksOverwritten, s.ChunksDiscarded, s.ChunksRead, s.ChunksCommittedOutOfOrder,
		s.WriteWrapCount, s.PatchesSucceeded, s.PatchesFailed, s.ReadaheadsSucceeded,
		s.ReadaheadsFailed, s.AbiViolations, s.TraceWriterPacketLoss)
}

func readLines(b *TraceBuffer) []string {
	var out []string
	for _, p := range readPackets(b) {
		out = append(out, fmt.Sprintf("p=%d w=%d dropped=%d data=%x", p.P, p.W, p.Dropped, p.Data))
	}
	return out
}

// runScript replays one golden script and returns the first mismatch.
// With observe, a no-op overwrite observer is installed, which makes every
// overwrite take the general erase walk instead of its fast path.
func runScript(t *testing.T, path string, observe bool) error {
	steps := parseScript(t, path)
	var b *TraceBuffer
	for _, st := range steps {
		op, kv := scriptArgs(t, st.op)
		var got []string
		switch op {
		case "buffer":
			pol := RingBuffer
			if kv["policy"] == "discard" {
				pol = Discard
			}
			var err error
			b, err = New(int(scriptUint(t, kv, "size")), pol)
			if err != nil {
				return fmt.Errorf("line %d: %v", st.line, err)
			}
			if observe {
				b.SetOverwriteObserver(func(SequenceProperties, [][]byte) {})
			}
		case "copy":
			p := uint16(scriptUint(t, kv, "p"))
			b.CopyChunkUntrusted(p, ClientIdentity{UID: 1000 + int32(p), PID: 100 + int32(p)},
				uint16(scriptUint(t, kv, "w")), uint32(scriptUint(t, kv, "c")),
				uint16(scriptUint(t, kv, "frags")), uint8(scriptUint(t, kv, "flags")),
				scriptUint(t, kv, "complete") == 1, scriptHex(t, kv["data"]))
		case "patch":
			var ps []Patch
			for _, a := range strings.Split(kv["at"], ",") {
				o, h, _ := strings.Cut(a, ":")
				off, err := strconv.ParseUint(o, 10, 32)
				if err != nil {
					t.Fatalf("line %d: bad offset %q", st.line, o)
				}
				var pt Patch
				pt.Offset = uint32(off)
				copy(pt.Data[:], scriptHex(t, h))
				ps = append(ps, pt)
			}
			ok := b.TryPatchChunkContents(uint16(scriptUint(t, kv, "p")), uint16(scriptUint(t, kv, "w")),
				uint32(scriptUint(t, kv, "c")), ps, scriptUint(t, kv, "pending") == 1)
			got = []string{fmt.Sprintf("ok=%d", map[bool]int{false: 0, true: 1}[ok])}
		case "read":
			got = readLines(b)
		case "cloneread":
			c := b.CloneReadOnly()
			got = append(readLines(c), formatStats(c.Stats()))
		case "stats":
			got = []string{formatStats(b.Stats())}
		default:
			t.Fatalf("line %d: unknown op %q", st.line, op)
		}
		if len(got) != len(st.want) {
			return fmt.Errorf("line %d %q: got %d lines, want %d\ngot:\n%s\nwant:\n%s", st.line, op,
				len(got), len(st.want), strings.Join(got, "\n"), strings.Join(st.want, "\n"))
		}
		for i := range got {
			if got[i] != st.want[i] {
				return fmt.Errorf("line %d %q result %d:\n got %s\nwant %s", st.line, op, i, got[i], st.want[i])
			}
		}
	}
	return nil
}

// TestGoldenScripts replays every script of Perfetto's TraceBufferV2
// conformance corpus and compares every output line, in exact order
// (including the order across sequences).
func TestGoldenScripts(t *testing.T) {
	dir := goldenDir(t, "tracebuffer-v2")
	files, err := filepath.Glob(filepath.Join(dir, "script_*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) != 95 {
		t.Fatalf("found %d scripts in %s, want 95", len(files), dir)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) {
			if err := runScript(t, f, false); err != nil {
				t.Fatal(err)
			}
			if err := runScript(t, f, true); err != nil {
				t.Fatalf("with an overwrite observer: %v", err)
			}
		})
	}
}
