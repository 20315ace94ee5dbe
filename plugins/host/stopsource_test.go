package host

import (
	"context"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/smb"
)

// StopSource stops the data source and delivers every commit, but leaves
// the child running (so that the caller can go on while it exits); End
// then ends it gracefully (exit status 0, not a kill), and a Kill after
// End waits for End instead of signalling.
func TestStopSourceThenEnd(t *testing.T) {
	path := counterPlugin(t)
	shm := newSMB(t, 64<<10, 4096)
	defer shm.Close()
	const packets = 500
	c := newConsumer(shm, packets)
	p, err := Launch(context.Background(), Config{
		Path: path, Name: "example.counter",
		DataSourceConfig: map[string]any{"packets": float64(packets), "size": 64},
		SMB:              shm, Policy: smb.Stall, OnCommit: c.OnCommit,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.full:
	case <-time.After(60 * time.Second):
		t.Fatal("the packets did not arrive within 60 s")
	}
	if err := p.StopSource(); err != nil {
		t.Fatal(err)
	}
	// The commit stream ended (every commit was delivered) once StopSource
	// returned.
	select {
	case <-p.Done():
	default:
		t.Fatal("the commit stream had not ended when StopSource returned")
	}
	if _, _, errs, _ := c.snapshot(); len(errs) != 0 {
		t.Fatalf("errors %v", errs)
	}
	if st, exited := p.WaitExit(50 * time.Millisecond); exited {
		t.Fatalf("the child %s after StopSource alone; it should wait for End", st)
	}
	p.End()
	st, exited := p.WaitExit(0)
	if !exited || st != "exited with status 0" {
		t.Fatalf("after End: %q (exited %v), want a graceful exit with status 0", st, exited)
	}
	p.Kill() // a no-op now
}
