package buffer

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// Helpers shared by the scenario tests (scenarios_*_test.go). Each scenario
// reproduces one entry of the acceptance catalogue in
// shared/reference/trace-buffer-v2.md §14 and asserts the outcome stated
// there.

// SMB chunk flags as the scenarios spell them.
const (
	scFrom  uint8 = 0x01 // first fragment continues from the previous chunk
	scOn    uint8 = 0x02 // last fragment continues on the next chunk
	scPatch uint8 = 0x04 // chunk needs patching
	scBoth        = scFrom | scOn
)

// scEOF stands for "ReadNextTracePacket returns false" (∅ in the catalogue).
const scEOF = "\x00<no packet>"

// scNew creates a buffer or fails the test.
func scNew(t testing.TB, size int, policy Policy) *TraceBuffer {
	t.Helper()
	b, err := New(size, policy)
	if err != nil {
		t.Fatalf("New(%d, %v): %v", size, policy, err)
	}
	if b == nil {
		t.Fatalf("New(%d, %v) returned nil buffer", size, policy)
	}
	t.Cleanup(func() { scCheckZeroTail(t, b) })
	return b
}

// scCheckZeroTail is the catalogue's fixture invariant: every byte from
// UsedSize to the end of the buffer is still zero.
func scCheckZeroTail(t testing.TB, b *TraceBuffer) {
	t.Helper()
	used := b.UsedSize()
	if used < 0 || used > b.Size() {
		t.Errorf("UsedSize %d outside [0, %d]", used, b.Size())
		return
	}
	for i := used; i < len(b.mem); i++ {
		if b.mem[i] != 0 {
			t.Errorf("byte %d (above UsedSize %d) is %#x, want 0", i, used, b.mem[i])
			return
		}
	}
}

// pk is the payload a read of fakePacketFragment(n, c) yields.
func pk(n int, c byte) string { return fakePayload(n, c) }

// cat concatenates payloads of the fragments of one reassembled packet.
func cat(parts ...string) string { return strings.Join(parts, "") }

// scShow shortens a payload for failure messages.
func scShow(s string) string {
	if s == scEOF {
		return "∅"
	}
	if len(s) > 40 {
		return strings.ReplaceAll(s[:20], "\x00", "\\0") + "…" + s[len(s)-12:] + " (len " + strconv.Itoa(len(s)) + ")"
	}
	return "\"" + strings.ReplaceAll(s, "\x00", "\\0") + "\""
}

// scRaw reads one packet without flattening it, so tests can look at the
// slices and the sequence properties.
func scRaw(b *TraceBuffer) (Packet, bool) {
	var p Packet
	ok := b.ReadNextTracePacket(&p)
	return p, ok
}

// scNext performs one ReadNextTracePacket per want (no BeginRead) and checks
// each result; it returns the packets read.
func scNext(t testing.TB, b *TraceBuffer, wants ...string) []readPacket {
	t.Helper()
	var got []readPacket
	for i, w := range wants {
		p, ok := readOne(b)
		switch {
		case w == scEOF && ok:
			t.Fatalf("read #%d: want ∅, got packet (p=%d w=%d dropped=%d) %s", i, p.P, p.W, p.Dropped, scShow(p.Data))
		case w != scEOF && !ok:
			t.Fatalf("read #%d: want %s, got ∅", i, scShow(w))
		case ok && p.Data != w:
			t.Fatalf("read #%d: want %s, got %s (p=%d w=%d)", i, scShow(w), scShow(p.Data), p.P, p.W)
		}
		if ok {
			got = append(got, p)
		}
	}
	return got
}

// scPass calls BeginRead, then behaves like scNext.
func scPass(t testing.TB, b *TraceBuffer, wants ...string) []readPacket {
	t.Helper()
	b.BeginRead()
	return scNext(t, b, wants...)
}

// scDrain calls BeginRead and returns every packet of the pass.
func scDrain(b *TraceBuffer) []readPacket { return readPackets(b) }

// scDropped checks the previous_packet_dropped value of a read packet.
func scDropped(t testing.TB, p readPacket, want uint32) {
	t.Helper()
	if p.Dropped != want {
		t.Fatalf("packet %s: PreviousPacketDropped = %d, want %d", scShow(p.Data), p.Dropped, want)
	}
}

// scDroppedNonZero checks that a loss was signalled on a read packet.
func scDroppedNonZero(t testing.TB, p readPacket) {
	t.Helper()
	if p.Dropped == 0 {
		t.Fatalf("packet %s: PreviousPacketDropped = 0, want a loss", scShow(p.Data))
	}
	if p.Dropped&LossPresent == 0 {
		t.Fatalf("packet %s: PreviousPacketDropped = %d lacks LossPresent", scShow(p.Data), p.Dropped)
	}
}

// scStats checks the named Stats fields (by Go field name).
func scStats(t testing.TB, b *TraceBuffer, want map[string]uint64) {
	t.Helper()
	st := b.Stats()
	v := reflect.ValueOf(st)
	for name, w := range want {
		f := v.FieldByName(name)
		if !f.IsValid() {
			t.Fatalf("Stats has no field %q", name)
		}
		if got := f.Uint(); got != w {
			t.Errorf("Stats.%s = %d, want %d", name, got, w)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// scCopyLen checks the "returns size k" of the catalogue: payload+16.
func scCopyLen(t testing.TB, c *fakeChunk, want int) {
	t.Helper()
	if got := c.Copy(); got != want {
		t.Fatalf("chunk (%d,%d,%d): copy size %d, want %d", c.p, c.w, c.c, got, want)
	}
}

// scPatchOf builds a single 4-byte patch.
func scPatchOf(off uint32, s string) Patch {
	var p Patch
	p.Offset = off
	copy(p.Data[:], s)
	return p
}

// scWithPatch returns the payload of fakePacketFragment(n, c) with the four
// payload bytes starting at payload offset off replaced by s.
func scWithPatch(n int, c byte, off int, s string) string {
	b := []byte(pk(n, c))
	copy(b[off:off+4], s)
	return string(b)
}
