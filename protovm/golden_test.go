package protovm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// goldenDir returns ../shared/golden/protovm (a failure in CI when it is
// missing, a skip locally).
func goldenDir(t testing.TB) string {
	t.Helper()
	return testsupport.GoldenDir(t, "protovm")
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.TrimSpace(s))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// TestGolden replays every case of Perfetto's golden ProtoVM runs and
// checks every status and every serialised state byte for byte.
func TestGolden(t *testing.T) {
	dir := goldenDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files in %s: %v", dir, err)
	}
	patches := 0
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			patches += replayGolden(t, file)
		})
	}
	t.Logf("%d cases, %d patches", len(files), patches)
}

func replayGolden(t *testing.T, file string) int {
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		program    []byte
		limit      int
		vm         *VM
		lastCode   string
		lastStatus Status
		pending    []byte
		havePend   bool
		n          int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	line := 0
	for sc.Scan() {
		line++
		l := sc.Text()
		if rest, ok := strings.CutPrefix(l, "# memory_usage_bytes="); ok && vm != nil {
			// Not part of the contract, but our accounting copies Perfetto's,
			// so it must agree too.
			want, err := strconv.Atoi(rest)
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
			if got := vm.MemoryUsage(); got != want {
				t.Errorf("line %d: memory usage %d, want %d", line, got, want)
			}
			continue
		}
		if rest, ok := strings.CutPrefix(l, "# abort_stacktrace:"); ok {
			// Compare the innermost message text (without the C++ location).
			inner, _, _ := strings.Cut(strings.TrimSpace(rest), " <- ")
			if _, msg, ok := strings.Cut(inner, " "); ok && inner != "" {
				var got string
				if len(lastStatus.Stack) > 0 {
					got = lastStatus.Stack[0]
				}
				if got != msg {
					t.Errorf("line %d: innermost abort message %q, want %q", line, got, msg)
				}
			} else if len(lastStatus.Stack) != 0 {
				t.Errorf("line %d: abort stack %q, want empty", line, lastStatus.Stack)
			}
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		key, val, _ := strings.Cut(l, " ")
		switch key {
		case "program":
			program = mustHex(t, val)
		case "memory_limit":
			limit, err = strconv.Atoi(val)
			if err != nil {
				t.Fatalf("line %d: %v", line, err)
			}
		case "initial_state":
			if strings.TrimSpace(val) == "" {
				vm, err = New(program, limit)
			} else {
				vm, _, err = NewWithState(program, limit, mustHex(t, val))
			}
			if err != nil {
				t.Fatalf("line %d: New: %v", line, err)
			}
		case "initial_serialized":
			want := mustHex(t, val)
			if got := vm.SerializeIncrementalState(nil); !bytes.Equal(got, want) {
				t.Fatalf("line %d: initial state %x, want %x", line, got, want)
			}
		case "patch":
			pending, havePend = mustHex(t, val), true
		case "=>":
			if !havePend {
				t.Fatalf("line %d: result without patch", line)
			}
			havePend = false
			st := vm.ApplyPatch(pending)
			n++
			fields := strings.Fields(val)
			wantCode := strings.TrimPrefix(fields[0], "status=")
			wantState := ""
			if len(fields) > 1 {
				wantState = strings.TrimPrefix(fields[1], "state=")
			}
			lastCode = st.Code.String()
			lastStatus = st
			if lastCode != wantCode {
				t.Errorf("line %d: patch %x: status %v, want %s", line, pending, st, wantCode)
			}
			if got := vm.SerializeIncrementalState(nil); !bytes.Equal(got, mustHex(t, wantState)) {
				t.Errorf("line %d: patch %x: state\n got %x\nwant %s (status %v)", line, pending, got, wantState, st)
			}
		case "clone_readonly":
			vm = vm.CloneReadOnly()
		default:
			t.Fatalf("line %d: unknown line %q", line, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	_ = lastCode
	return n
}

// TestProtoVMGolden is TestGolden under the package's -run ProtoVM filter.
func TestProtoVMGolden(t *testing.T) { TestGolden(t) }
