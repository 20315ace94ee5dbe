package perfettosvc

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/testsupport"
	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// The small helpers the Perfetto service's tests share with package
// pipeline's tests (which cannot export them: they are in its test
// files), over pipeline's, tracefile's and testsupport's exported API.

// fieldCloneSnapshotTrigger is TracePacket.clone_snapshot_trigger.
const fieldCloneSnapshotTrigger = 113

// tracePacket is one packet of an output trace, decoded.
type tracePacket struct {
	raw  []byte
	info tracefile.PacketInfo
}

// readTrace reads and decodes every packet of a trace file.
func readTrace(t *testing.T, path string) []tracePacket {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, err := tracefile.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := make([]tracePacket, 0, len(raw))
	for i, p := range raw {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatalf("%s: packet %d: %v", path, i, err)
		}
		out = append(out, tracePacket{raw: p, info: info})
	}
	return out
}

// loadYAML loads a session config from YAML text with pipeline.Load.
func loadYAML(t testing.TB, text string, sets ...string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "session.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.LoadOptions{Path: path, Sets: sets})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// scriptedID is the (writer, index) and body of a test packet
// (tracefile.FieldForTesting, body starting with two little-endian
// uint32), if p is one.
func scriptedID(p []byte) (w, i int, body []byte, ok bool) {
	it := wire.Fields(p)
	for it.Next() {
		f := it.Field()
		if f.Num == tracefile.FieldForTesting && f.Type == protowire.BytesType {
			if len(f.Bytes) < 8 {
				return 0, 0, nil, false
			}
			return int(binary.LittleEndian.Uint32(f.Bytes)), int(binary.LittleEndian.Uint32(f.Bytes[4:])), f.Bytes, true
		}
	}
	return 0, 0, nil, false
}

// waitFor fails t unless cond holds within d.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	if !testsupport.WaitFor(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

// lockedBuffer is a log destination written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tcMsg encodes a message from (field, value) pairs: a uint64 is a
// varint, a float64 a fixed64, a string or []byte length-delimited.
func tcMsg(fields ...any) []byte {
	var b []byte
	for i := 0; i+1 < len(fields); i += 2 {
		n := protowire.Number(fields[i].(int))
		switch v := fields[i+1].(type) {
		case uint64:
			b = wire.AppendVarint(b, n, v)
		case float64:
			b = protowire.AppendTag(b, n, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(v))
		case string:
			b = wire.AppendString(b, n, v)
		case []byte:
			b = wire.AppendBytes(b, n, v)
		}
	}
	return b
}

// walkProto calls fn for each field of b: its number, its varint or
// fixed value, its payload if length-delimited.
func walkProto(b []byte, fn func(num protowire.Number, v uint64, payload []byte) error) error {
	return wire.Walk(b, func(f wire.Field) error { return fn(f.Num, f.Varint, f.Bytes) })
}

// stringField is the last field num of b as a string ("" if none).
func stringField(b []byte, num protowire.Number) string {
	return string(lastField(b, num).Bytes)
}
