package remote

import (
	"bytes"
	"testing"

	"github.com/tracepipe/tracepipe/tracefile"
)

// The final TraceStats reports what the bound dropped, so the bound must
// not drop it: at the bound, WriteLast gets one batch beyond it, sealed.
func TestOutboxWriteLastPassesTheBound(t *testing.T) {
	o := NewOutbox(64, 2)
	pkt := make([]byte, 100)
	for range 5 {
		if err := o.Write([][]byte{pkt}); err != nil {
			t.Fatal(err)
		}
	}
	if st := o.Stats(); st.PacketsDroppedQueue == 0 {
		t.Fatalf("premise: the bound dropped nothing: %+v", st)
	}
	dropped := o.Stats().PacketsDroppedQueue
	last := []byte("final trace stats")
	if err := o.WriteLast(last); err != nil {
		t.Fatal(err)
	}
	if st := o.Stats(); st.PacketsDroppedQueue != dropped {
		t.Fatalf("WriteLast was dropped: %+v", st)
	}
	if o.Sealed() != 3 {
		t.Fatalf("%d batches sealed, want the 2 of the bound + 1", o.Sealed())
	}
	b := o.Next(3)
	if b == nil {
		t.Fatal("the last batch is not queued")
	}
	rd, err := tracefile.NewReader(bytes.NewReader(b.Data))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		r, err := rd.Next()
		if err != nil {
			break
		}
		got = append(got[:0], r.Packet...)
	}
	if string(got) != string(last) {
		t.Fatalf("last packet of the extra batch %q, want %q", got, last)
	}
}
