package wire

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestAppendAndWalk(t *testing.T) {
	var b []byte
	b = AppendVarint(b, 1, 300)
	b = AppendInt32(b, 2, -1)
	b = AppendBool(b, 3, true)
	b = AppendBytes(b, 4, []byte("abc"))
	b = AppendString(b, 5, "xy")
	b = AppendNested(b, 6, func(b []byte) []byte { return AppendVarint(b, 1, 7) })
	b = protowire.AppendTag(b, 7, protowire.Fixed32Type)
	b = protowire.AppendFixed32(b, 0xdeadbeef)
	b = protowire.AppendTag(b, 8, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, 1<<40)

	type got struct {
		num protowire.Number
		v   uint64
		p   string
	}
	var fields []got
	it := Fields(b)
	prevEnd := 0
	for it.Next() {
		f := it.Field()
		if f.Off != prevEnd {
			t.Errorf("field %d starts at %d, previous ended at %d", f.Num, f.Off, prevEnd)
		}
		if f.Type == protowire.BytesType && !bytes.Equal(b[f.ValOff:f.End], f.Bytes) {
			t.Errorf("field %d: ValOff..End = %q, Bytes = %q", f.Num, b[f.ValOff:f.End], f.Bytes)
		}
		prevEnd = f.End
		fields = append(fields, got{f.Num, f.Varint, string(f.Bytes)})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	if prevEnd != len(b) {
		t.Errorf("walk ended at %d of %d", prevEnd, len(b))
	}
	want := []got{{1, 300, ""}, {2, 1<<64 - 1, ""}, {3, 1, ""}, {4, 0, "abc"}, {5, 0, "xy"},
		{6, 0, "\x08\x07"}, {7, 0xdeadbeef, ""}, {8, 1 << 40, ""}}
	if len(fields) != len(want) {
		t.Fatalf("fields %v, want %v", fields, want)
	}
	for i := range want {
		if fields[i] != want[i] {
			t.Errorf("field %d = %+v, want %+v", i, fields[i], want[i])
		}
	}
}

func TestWalkErrors(t *testing.T) {
	good := AppendVarint(nil, 1, 5)
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"bad tag", slices.Concat(good, []byte{0x80}), "offset 2: tag: unexpected EOF"},
		{"field zero", slices.Concat(good, []byte{0x00}), "offset 2: tag: proto:\u00a0invalid field number"},
		{"truncated bytes", slices.Concat(good, []byte{0x12, 5, 'a'}), "offset 2: field 2: unexpected EOF"},
		{"truncated varint", slices.Concat(good, []byte{0x18, 0x80}), "offset 2: field 3: unexpected EOF"},
	} {
		n := 0
		err := Walk(c.b, func(Field) error { n++; return nil })
		// protobuf spells "proto:" with a space or a no-break space at random.
		if err == nil || strings.ReplaceAll(err.Error(), "proto: ", "proto:\u00a0") != c.want {
			t.Errorf("%s: err %v, want %s", c.name, err, c.want)
		}
		var we *Error
		if !errors.As(err, &we) || n != 1 {
			t.Errorf("%s: %T after %d fields, want *Error after 1", c.name, err, n)
		}
		if we != nil && we.Num != 0 && we.ValOff != 3 {
			t.Errorf("%s: ValOff %d, want 3 (just after the one-byte tag at 2)", c.name, we.ValOff)
		}
	}
	// A tag in more bytes than it needs: the value starts after all of them.
	it := Fields([]byte{0x88, 0x80, 0x00, 0x80})
	if it.Next() || it.Malformed() == nil || it.Malformed().Off != 0 || it.Malformed().ValOff != 3 {
		t.Errorf("overlong tag: %+v, want a field 1 error with its value at offset 3", it.Malformed())
	}
	stop := errors.New("stop")
	if err := Walk(slices.Concat(good, good), func(Field) error { return stop }); err != stop {
		t.Errorf("fn error: got %v", err)
	}
}

func TestIterAllocs(t *testing.T) {
	var b []byte
	for i := range 20 {
		b = AppendVarint(b, protowire.Number(i+1), uint64(i))
		b = AppendBytes(b, 100, []byte("payload"))
	}
	var sum uint64
	allocs := testing.AllocsPerRun(100, func() {
		for it := Fields(b); it.Next(); {
			sum += it.Field().Varint
		}
	})
	if allocs != 0 {
		t.Errorf("walk allocates %v times", allocs)
	}
	// A malformed message (dropped by hot paths) costs no allocation
	// either, as long as the caller asks Malformed rather than Err.
	bad := slices.Concat(b, []byte{0x12, 0x7f})
	allocs = testing.AllocsPerRun(100, func() {
		it := Fields(bad)
		for it.Next() {
			sum += it.Field().Varint
		}
		if it.Malformed() == nil {
			t.Fatal("malformed message walked without error")
		}
	})
	if allocs != 0 {
		t.Errorf("malformed walk allocates %v times", allocs)
	}
}

func FuzzFields(f *testing.F) {
	f.Add(AppendBytes(AppendVarint(nil, 1, 1), 2, []byte("x")))
	f.Add([]byte{0x80})
	f.Add([]byte{0x0b, 0x0c})
	f.Fuzz(func(t *testing.T, b []byte) {
		end := 0
		it := Fields(b)
		for it.Next() {
			f := it.Field()
			if f.Off != end || f.End <= f.Off || f.End > len(b) || f.ValOff > f.End {
				t.Fatalf("field %+v after end %d in %d bytes", f, end, len(b))
			}
			end = f.End
		}
		if it.Err() == nil && end != len(b) {
			t.Fatalf("walk stopped at %d of %d without error", end, len(b))
		}
		// The same fields and the same verdict as protowire's own walk.
		fields, ok := 0, true
		for off := 0; off < len(b); fields++ {
			num, typ, n := protowire.ConsumeTag(b[off:])
			if n < 0 {
				ok = false
				break
			}
			m := protowire.ConsumeFieldValue(num, typ, b[off+n:])
			if m < 0 {
				ok = false
				break
			}
			off += n + m
		}
		walked := 0
		for it := Fields(b); it.Next(); {
			walked++
		}
		if walked != fields || ok != (it.Err() == nil) {
			t.Fatalf("walked %d fields (err %v), protowire %d (ok %v)", walked, it.Err(), fields, ok)
		}
	})
}

func TestLast(t *testing.T) {
	b := AppendVarint(nil, 1, 5)
	b = AppendString(b, 2, "a")
	b = AppendVarint(b, 1, 6)
	b = AppendString(b, 2, "b")
	if f, ok := Last(b, 1, protowire.VarintType); !ok || f.Varint != 6 {
		t.Errorf("Last varint 1 = %+v, %v; want 6", f, ok)
	}
	if f, ok := Last(b, 2, protowire.BytesType); !ok || string(f.Bytes) != "b" {
		t.Errorf("Last bytes 2 = %q, %v; want b", f.Bytes, ok)
	}
	if _, ok := Last(b, 2, protowire.VarintType); ok {
		t.Error("Last found field 2 as a varint")
	}
	if _, ok := Last(slices.Concat(b, []byte{0x80}), 1, protowire.VarintType); ok {
		t.Error("Last accepted a malformed message")
	}
}
