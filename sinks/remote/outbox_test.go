package remote

import (
	"testing"
)

// Steady state allocates nothing: write, seal, hand to the transport,
// acknowledge, with batch buffers recycled.
func TestOutboxSteadyStateAllocs(t *testing.T) {
	o := NewOutbox(4<<10, 4)
	pkt := make([]byte, 1000)
	batch := [][]byte{pkt, pkt}
	cycle := func() {
		o.Write(batch)
		o.Seal()
		b := o.Next(o.Acked() + 1)
		seq := b.Seq
		o.Release(b)
		o.Ack(seq)
	}
	for range 10 {
		cycle()
	}
	if n := testing.AllocsPerRun(100, cycle); n != 0 {
		t.Errorf("%v allocations per cycle", n)
	}
	if st := o.Stats(); st.PacketsWritten != 2*(10+101) || st.PacketsDropped() != 0 {
		t.Errorf("stats %+v", st)
	}
}

// Packets beyond the bound are counted, never block, and the batches that
// were sealed keep contiguous numbers.
func TestOutboxBound(t *testing.T) {
	o := NewOutbox(1000, 2)
	pkt := make([]byte, 600)
	for range 10 {
		if err := o.Write([][]byte{pkt}); err != nil {
			t.Fatal(err)
		}
	}
	st := o.Stats()
	if st.PacketsDroppedQueue != 6 || o.Sealed() != 2 { // 2 packets per batch (sealed at 1000 bytes)
		t.Fatalf("dropped %d, sealed %d; want 6 dropped, 2 sealed", st.PacketsDroppedQueue, o.Sealed())
	}
	o.Ack(2)
	if err := o.Write([][]byte{pkt, pkt}); err != nil {
		t.Fatal(err)
	}
	if o.Sealed() != 3 {
		t.Fatalf("sealed %d after room was made, want 3", o.Sealed())
	}
	if b := o.Next(3); b == nil || b.Seq != 3 || b.Packets != 2 {
		t.Fatalf("next batch %+v", b)
	}
}
