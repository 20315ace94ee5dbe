package host

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/smb"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildPath string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// A goroutine outliving the tests (a plugin's log copier, a gRPC
		// connection) fails the run.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	removeTestBuilds()
	os.Exit(code)
}

// goTool finds the go command: on PATH, else under $GOROOT, else under
// the default install location.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	var tried []string
	if root := os.Getenv("GOROOT"); root != "" {
		tried = append(tried, filepath.Join(root, "bin", "go"))
	}
	tried = append(tried, "/usr/local/go/bin/go")
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("the go command is needed to build the example plugin: not on PATH, not at %v", tried)
}

// counterPlugin builds plugins/example/counterplugin once per test binary
// and returns its path.
func counterPlugin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goCmd, err := goTool()
		if err != nil {
			buildErr = err
			return
		}
		buildDir, err = os.MkdirTemp("", "tracepipe-plugin-test")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(buildDir, "counterplugin")
		args := []string{"build", "-o", buildPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(goCmd, append(args, "../example/counterplugin")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./plugins/example/counterplugin: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// counterPacket is packet i of example.counter with a payload of size
// bytes and timestamp ts, encoded independently of the plugin's code, as
// the service reads it: the TraceWriter prefixes a sequence's first packet
// with first_packet_on_sequence (field 87) = true.
func counterPacket(i, size int, ts uint64) []byte {
	var b []byte
	if i == 0 {
		b = protowire.AppendTag(b, 87, protowire.VarintType)
		b = protowire.AppendVarint(b, 1)
	}
	// TestEvent{str: size letters, seq_value: i, counter: i}.
	str := make([]byte, size)
	for j := range str {
		str[j] = 'a' + byte(j%26)
	}
	var payload []byte
	payload = protowire.AppendTag(payload, 1, protowire.BytesType)
	payload = protowire.AppendBytes(payload, str)
	payload = protowire.AppendTag(payload, 2, protowire.VarintType)
	payload = protowire.AppendVarint(payload, uint64(i))
	payload = protowire.AppendTag(payload, 3, protowire.VarintType)
	payload = protowire.AppendVarint(payload, uint64(i))
	b = protowire.AppendTag(b, 8, protowire.VarintType)
	b = protowire.AppendVarint(b, ts)
	b = protowire.AppendTag(b, 900, protowire.BytesType)
	return protowire.AppendBytes(b, payload)
}

// checkCounterPacket reports whether pkt is packet i of example.counter
// (see counterPacket), its timestamp a clock reading later than prev
// (the plugin stamps CLOCK_BOOTTIME, strictly increasing); it returns the
// timestamp.
func checkCounterPacket(pkt []byte, i, size int, prev uint64) (uint64, error) {
	var ts uint64
	for b := pkt; len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("packet %d: bad tag", i)
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return 0, fmt.Errorf("packet %d: bad field %d", i, num)
		}
		if num == 8 && typ == protowire.VarintType {
			ts, _ = protowire.ConsumeVarint(b[n:])
		}
		b = b[n+m:]
	}
	if ts <= prev {
		return 0, fmt.Errorf("packet %d: timestamp %d after %d: not a clock reading", i, ts, prev)
	}
	if want := counterPacket(i, size, ts); !bytes.Equal(pkt, want) {
		return 0, fmt.Errorf("packet %d: got %d bytes %x..., want %d bytes %x...", i, len(pkt), pkt[:min(16, len(pkt))], len(want), want[:16])
	}
	return ts, nil
}

// consumer plays the service for one plugin: its OnCommit decodes each
// CommitData, reads the chunks it names out of the SMB with smb.Reader and
// rebuilds the packets of every writer. Everything runs on the one
// goroutine that calls OnCommit; the test reads results under mu.
type consumer struct {
	reader *smb.Reader

	mu       sync.Mutex
	packets  [][]byte
	flushIDs []uint64
	commits  int
	errs     []error
	want     int           // packets to wait for
	full     chan struct{} // closed when len(packets) reached want
	flushed  chan uint64   // every non-zero FlushRequestID

	// per-writer reassembly state
	lastChunk map[uint16]uint32
	pending   map[uint16][]byte
	open      map[uint16]bool
}

func newConsumer(s *smb.SMB, want int) *consumer {
	return &consumer{
		reader:    smb.NewReader(s),
		want:      want,
		full:      make(chan struct{}),
		flushed:   make(chan uint64, 16),
		lastChunk: map[uint16]uint32{},
		pending:   map[uint16][]byte{},
		open:      map[uint16]bool{},
	}
}

func (c *consumer) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

func (c *consumer) OnCommit(data []byte) {
	var cd smb.CommitData
	if err := cd.Unmarshal(data); err != nil {
		c.mu.Lock()
		c.errorf("commit %d: %v", c.commits, err)
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.commits++
	c.reader.ReadCommit(&cd, c.chunk, func(p *smb.ChunkToPatch) {
		// TraceWriter.WritePacket never leaves a size to patch.
		c.errorf("unexpected patch for writer %d chunk %d", p.WriterID, p.ChunkID)
	})
	if cd.FlushRequestID != 0 {
		c.flushIDs = append(c.flushIDs, cd.FlushRequestID)
		select {
		case c.flushed <- cd.FlushRequestID:
		default:
		}
	}
}

// chunk appends one chunk's fragments; called with mu held.
func (c *consumer) chunk(v *smb.ChunkView) {
	switch {
	case !v.Complete:
		c.errorf("writer %d chunk %d: committed incomplete", v.WriterID, v.ChunkID)
		return
	case v.Aborted:
		c.errorf("writer %d chunk %d: aborted by the writer (packet dropped)", v.WriterID, v.ChunkID)
		return
	case v.Flags&smb.FlagChunkNeedsPatching != 0:
		c.errorf("writer %d chunk %d: needs patching", v.WriterID, v.ChunkID)
		return
	}
	if last, seen := c.lastChunk[v.WriterID]; seen && v.ChunkID != last+1 {
		c.errorf("writer %d: chunk %d after chunk %d", v.WriterID, v.ChunkID, last)
	}
	c.lastChunk[v.WriterID] = v.ChunkID
	b := v.Payload
	for k := 0; k < int(v.Fragments); k++ {
		size, n := protowire.ConsumeVarint(b)
		if n < 0 || uint64(len(b)-n) < size {
			c.errorf("writer %d chunk %d: fragment %d does not parse", v.WriterID, v.ChunkID, k)
			return
		}
		frag := b[n : n+int(size)]
		b = b[n+int(size):]
		first := k == 0 && v.Flags&smb.FlagFirstPacketContinuesFromPrevChunk != 0
		last := k == int(v.Fragments)-1 && v.Flags&smb.FlagLastPacketContinuesOnNextChunk != 0
		if first != c.open[v.WriterID] {
			c.errorf("writer %d chunk %d: fragment %d: continuation flag %v but a packet open %v", v.WriterID, v.ChunkID, k, first, c.open[v.WriterID])
			c.pending[v.WriterID], c.open[v.WriterID] = nil, false
		}
		p := append(c.pending[v.WriterID], frag...)
		if last {
			c.pending[v.WriterID], c.open[v.WriterID] = p, true
			continue
		}
		c.pending[v.WriterID], c.open[v.WriterID] = nil, false
		if len(p) == 0 {
			continue // padding
		}
		c.packets = append(c.packets, bytes.Clone(p))
		if len(c.packets) == c.want {
			close(c.full)
		}
	}
}

func (c *consumer) snapshot() (packets [][]byte, flushIDs []uint64, errs []error, rejected uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.packets, append([]uint64(nil), c.flushIDs...), append([]error(nil), c.errs...), c.reader.Stats().TotalRejected()
}
