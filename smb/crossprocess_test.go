package smb

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

const childEnv = "TRACEPIPE_SMB_CHILD"

// crossProcessPackets is what the child writes (deterministic).
func crossProcessPackets() [][]byte {
	rng := rand.New(rand.NewPCG(7, 7))
	var ps [][]byte
	for i := range 300 {
		n := rng.IntN(3000)
		if i%50 == 0 {
			n = rng.IntN(300 << 10)
		}
		p := make([]byte, n)
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		ps = append(ps, p)
	}
	return ps
}

// childMain runs in the re-executed test binary: it maps the SMB memfd
// (fd 3), writes the packets, and sends every commit to the parent over
// the pipe (fd 4) as a uint32 length + marshalled CommitData.
func childMain() int {
	s, err := MapFD(3, 4096)
	if err != nil {
		os.Stderr.WriteString("child: " + err.Error() + "\n")
		return 2
	}
	out := bufio.NewWriter(os.NewFile(4, "commits"))
	var buf []byte
	var werr error
	arb, err := NewArbiter(s, ArbiterOptions{OnCommit: func(cd *CommitData) {
		buf = cd.AppendMarshal(binary.LittleEndian.AppendUint32(buf[:0], 0))
		binary.LittleEndian.PutUint32(buf, uint32(len(buf)-4))
		if _, err := out.Write(buf); err == nil {
			werr = out.Flush()
		} else {
			werr = err
		}
	}})
	if err != nil {
		return 2
	}
	w, _ := arb.NewTraceWriter(1, Stall)
	for i, p := range crossProcessPackets() {
		if i%2 == 0 {
			err = w.WritePacket(p)
		} else {
			tp := w.NewTracePacket()
			tp.AppendRaw(p)
			err = tp.Finish()
		}
		if err != nil {
			os.Stderr.WriteString("child: " + err.Error() + "\n")
			return 3
		}
	}
	if err := w.Close(); err != nil || werr != nil {
		return 4
	}
	s.Close()
	return 0
}

func TestCrossProcess(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	s, err := NewMemfdSMB("tracepipe-xproc", 64<<10, 4096) // 16 chunks for ~1.5 MB: recycling is required
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dup, err := unix.Dup(s.Fd())
	if err != nil {
		t.Fatal(err)
	}
	memf := os.NewFile(uintptr(dup), "smb")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrossProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.ExtraFiles = []*os.File{memf, pw}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	memf.Close()
	pw.Close()

	r := NewReader(s)
	ra := newReassembler()
	var cd CommitData
	in := bufio.NewReader(pr)
	commits := 0
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(in, hdr[:]); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("reading commit length: %v", err)
		}
		rec := make([]byte, binary.LittleEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(in, rec); err != nil {
			t.Fatalf("reading commit: %v", err)
		}
		if err := cd.Unmarshal(rec); err != nil {
			t.Fatal(err)
		}
		r.ReadCommit(&cd, ra.addChunk, ra.applyPatch)
		commits++
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	if r.Stats().TotalRejected() != 0 {
		t.Fatalf("rejections: %+v", r.Stats())
	}
	got, err := ra.packets(1)
	if err != nil {
		t.Fatal(err)
	}
	want := crossProcessPackets()
	want[0] = append([]byte{0xb8, 0x05, 0x01}, want[0]...)
	var nonEmpty [][]byte
	for _, p := range want {
		if len(p) > 0 {
			nonEmpty = append(nonEmpty, p)
		}
	}
	if len(got.packets) != len(nonEmpty) || got.lost != 0 {
		t.Fatalf("got %d packets (lost %d), want %d", len(got.packets), got.lost, len(nonEmpty))
	}
	for i := range nonEmpty {
		if !bytes.Equal(got.packets[i], nonEmpty[i]) {
			t.Fatalf("packet %d differs", i)
		}
	}
	if r.Stats().ChunksRead < 16 {
		t.Fatalf("only %d chunks: the SMB was never recycled", r.Stats().ChunksRead)
	}
	t.Logf("%d commits, %d chunks, %d packets across processes", commits, r.Stats().ChunksRead, len(got.packets))
}
