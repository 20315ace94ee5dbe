package producer

import (
	"errors"
	"sync"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// source writes n packets from Start's goroutine and records the calls.
type source struct {
	n     int
	w     plugins.PacketWriter
	done  chan struct{}
	mu    sync.Mutex
	calls []string
}

func (s *source) record(c string) { s.mu.Lock(); s.calls = append(s.calls, c); s.mu.Unlock() }

func (s *source) Start(h plugins.Host) error {
	s.record("start")
	w, err := h.NewWriter()
	if err != nil {
		return err
	}
	s.w = w
	go func() {
		defer close(s.done)
		for i := range s.n {
			if err := w.WritePacket([]byte{0x08, byte(i)}); err != nil {
				panic(err)
			}
		}
	}()
	return nil
}

func (s *source) Flush() error           { s.record("flush"); <-s.done; return nil }
func (s *source) ClearIncrementalState() { s.record("clear") }
func (s *source) Stop() error            { s.record("stop"); <-s.done; return nil }
func (s *source) Done() <-chan struct{}  { return s.done }

// The runtime acknowledges every flush after the chunks returned before
// it, closes the writers on Stop (no packet left in a half-written chunk)
// and refuses writers afterwards.
func TestRuntimeLifecycle(t *testing.T) {
	shm, err := smb.NewHeapSMB(64<<10, 4096)
	if err != nil {
		t.Fatal(err)
	}
	rd := smb.NewReader(shm)
	var packets int
	var acks []uint64
	var mu sync.Mutex
	src := &source{n: 500, done: make(chan struct{})}
	rt, err := New(Config{SMB: shm, TargetBuffer: 3, Policy: smb.Stall, OnCommit: func(cd *smb.CommitData) {
		mu.Lock()
		defer mu.Unlock()
		rd.ReadCommit(cd, func(v *smb.ChunkView) {
			if v.TargetBuffer != 3 {
				t.Errorf("chunk for buffer %d", v.TargetBuffer)
			}
			b := v.Payload
			for range v.Fragments {
				size, k := protowire.ConsumeVarint(b)
				if k < 0 || uint64(len(b)-k) < size {
					t.Error("bad fragment")
					return
				}
				if size > 0 { // zero-length fragments are padding
					packets++
				}
				b = b[k+int(size):]
			}
		}, nil)
		if cd.FlushRequestID != 0 {
			acks = append(acks, cd.FlushRequestID)
		}
	}}, src)
	if err != nil {
		t.Fatal(err)
	}
	if rt.Done() == nil {
		t.Fatal("a Finite source has no Done channel")
	}
	if err := rt.Flush(1); err != nil { // before Start: acknowledged, source not called
		t.Fatal(err)
	}
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(); err == nil {
		t.Fatal("second Start accepted")
	}
	if err := rt.Flush(2); err != nil {
		t.Fatal(err)
	}
	rt.ClearIncrementalState()
	if err := rt.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.NewWriter(); err == nil {
		t.Fatal("NewWriter after Stop accepted")
	}
	if err := src.w.WritePacket([]byte{8, 1}); !errors.Is(err, smb.ErrWriterClosed) {
		t.Fatalf("writer after Stop: %v, want ErrWriterClosed", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if packets != 500 || len(acks) != 2 || acks[0] != 1 || acks[1] != 2 {
		t.Fatalf("%d packets committed, acks %v; want 500 and [1 2]", packets, acks)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if got := len(src.calls); got != 4 || src.calls[0] != "start" || src.calls[3] != "stop" {
		t.Fatalf("calls %v", src.calls)
	}
}
