package builtin

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/tracepipe/tracepipe/smb"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
)

// ---- fake host and writer ----

// fakeWriter records packets and which of them a Flush (or Close) has
// committed. It also checks that a single goroutine uses it.
type fakeWriter struct {
	mu        sync.Mutex
	packets   [][]byte // every packet, unless discard
	n         int      // packets written
	discard   bool     // count packets without keeping them
	committed int      // the first committed packets were flushed
	flushes   int
	closed    bool
	owner     uint64 // goroutine that made the first call
	misuse    []string
	failEvery int           // if > 0, every failEvery-th WritePacket fails
	blocked   chan struct{} // if not nil, WritePacket waits until it is closed
	writes    int
	// dropEvery > 0: every dropEvery-th WritePacket is dropped as a full
	// SMB drops it (no error; Stats counts it); dropsAt holds, for each,
	// the index in packets of the next packet kept.
	dropEvery int
	dropped   uint64
	dropsAt   []int
}

// Stats reports the dropped packets, as smb.TraceWriter's does.
func (w *fakeWriter) Stats() smb.WriterStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return smb.WriterStats{PacketsDropped: w.dropped}
}

var errFake = errors.New("fake write error")

func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		id, _ := strconv.ParseUint(string(b[:i]), 10, 64)
		return id
	}
	return 0
}

func (w *fakeWriter) checkOwner(op string) {
	g := goid()
	if w.owner == 0 {
		w.owner = g
	} else if g != w.owner {
		w.misuse = append(w.misuse, fmt.Sprintf("%s from goroutine %d, owner %d", op, g, w.owner))
	}
	if w.closed {
		w.misuse = append(w.misuse, op+" after Close")
	}
}

func (w *fakeWriter) WritePacket(p []byte) error {
	w.mu.Lock()
	w.checkOwner("WritePacket")
	w.writes++
	fail := w.failEvery > 0 && w.writes%w.failEvery == 0
	blocked := w.blocked
	if w.dropEvery > 0 && w.writes%w.dropEvery == 0 {
		w.dropped++
		w.dropsAt = append(w.dropsAt, len(w.packets))
		w.mu.Unlock()
		return nil
	}
	if !fail {
		w.n++
		if !w.discard {
			w.packets = append(w.packets, bytes.Clone(p))
		}
	}
	w.mu.Unlock()
	if blocked != nil {
		<-blocked // held until the test closes it
	}
	if fail {
		return errFake
	}
	return nil
}

func (w *fakeWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkOwner("Flush")
	w.committed = w.n
	w.flushes++
	return nil
}

func (w *fakeWriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checkOwner("Close")
	w.committed = w.n
	w.closed = true
	return nil
}

// snapshot returns copies of the recorded state.
func (w *fakeWriter) snapshot() (packets [][]byte, committed int, closed bool, misuse []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.packets), w.committed, w.closed, slices.Clone(w.misuse)
}

func (w *fakeWriter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

type fakeHost struct {
	mu        sync.Mutex
	writers   []*fakeWriter
	failAfter int // NewWriter fails once this many writers exist (0 = never)
	failEvery int
	blocked   chan struct{}
	discard   bool
	dropEvery int
}

func (h *fakeHost) NewWriter() (plugins.PacketWriter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failAfter > 0 && len(h.writers) >= h.failAfter {
		return nil, errors.New("no more writers")
	}
	w := &fakeWriter{failEvery: h.failEvery, blocked: h.blocked, discard: h.discard, dropEvery: h.dropEvery}
	h.writers = append(h.writers, w)
	return w, nil
}

func (h *fakeHost) writer(i int) *fakeWriter {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writers[i]
}

func (h *fakeHost) numWriters() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.writers)
}

// checkWritersSane fails on any single-goroutine violation and on writers
// left unclosed after Stop.
func checkWritersSane(t *testing.T, h *fakeHost) {
	t.Helper()
	for i := range h.numWriters() {
		_, _, closed, misuse := h.writer(i).snapshot()
		if len(misuse) > 0 {
			t.Errorf("writer %d misused: %v", i, misuse)
		}
		if !closed {
			t.Errorf("writer %d not closed after Stop", i)
		}
	}
}

// ---- proto decoding ----

// field is one decoded protobuf field.
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64 // varint / fixed value
	b   []byte // length-delimited value
}

// decode splits msg into its fields; it fails the test on malformed input.
func decode(t testing.TB, msg []byte) []field {
	t.Helper()
	fs, err := decodeErr(msg)
	if err != nil {
		t.Fatalf("decode %x: %v", msg, err)
	}
	return fs
}

func decodeErr(msg []byte) ([]field, error) {
	var out []field
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		msg = msg[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.VarintType:
			f.v, n = protowire.ConsumeVarint(msg)
		case protowire.BytesType:
			f.b, n = protowire.ConsumeBytes(msg)
		case protowire.Fixed64Type:
			f.v, n = protowire.ConsumeFixed64(msg)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(msg)
			f.v = uint64(v)
		default:
			return nil, fmt.Errorf("wire type %d", typ)
		}
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		msg = msg[n:]
		out = append(out, f)
	}
	return out, nil
}

// reservedFields are the top-level TracePacket fields only the service may
// write (trace-format.md §3).
var reservedFields = map[protowire.Number]string{
	3: "trusted_uid", 10: "trusted_packet_sequence_id", 33: "trace_config", 35: "trace_stats",
	36: "synchronization_marker", 50: "compressed_packets", 133: "zstd_compressed_packets",
	69: "service_event", 79: "trusted_pid", 98: "machine_id", 124: "trace_provenance", 125: "protovms",
}

// checkProducerPacket fails if p would be rejected by the service's
// packet validator.
func checkProducerPacket(t testing.TB, p []byte) {
	t.Helper()
	fs, err := decodeErr(p)
	if err != nil {
		t.Fatalf("packet not well-formed: %v", err)
	}
	for _, f := range fs {
		if name, bad := reservedFields[f.num]; bad {
			t.Fatalf("packet sets service-only field %d (%s)", f.num, name)
		}
	}
}

// one returns the single field num of fs (failing if there are several).
func one(t testing.TB, fs []field, num protowire.Number) (field, bool) {
	t.Helper()
	var out field
	found := 0
	for _, f := range fs {
		if f.num == num {
			out = f
			found++
		}
	}
	if found > 1 {
		t.Fatalf("field %d appears %d times", num, found)
	}
	return out, found == 1
}

func all(fs []field, num protowire.Number) []field {
	var out []field
	for _, f := range fs {
		if f.num == num {
			out = append(out, f)
		}
	}
	return out
}

// NewTracePacket returns an inert packet: the builtin sources under test
// write whole packets with WritePacket.
func (w *fakeWriter) NewTracePacket() smb.TracePacket {
	w.mu.Lock()
	w.misuse = append(w.misuse, "NewTracePacket on the fake writer")
	w.mu.Unlock()
	return smb.TracePacket{}
}
