// Package tracetest reads the traces a test's session wrote, for tests of
// the packages that write them (pipeline, perfettosvc, restore). It is for
// tests only: no production code imports it. Package tracefile's own tests
// cannot use it (it imports tracefile).
package tracetest

import (
	"encoding/binary"
	"os"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Packet is one packet of an output trace, decoded.
type Packet struct {
	Raw  []byte
	Info tracefile.PacketInfo
}

// ReadAll reads every packet of a trace file, failing t (naming the file)
// on anything it cannot read.
func ReadAll(t testing.TB, path string) [][]byte {
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
	return raw
}

// ReadTrace reads and decodes every packet of a trace file, failing t
// (naming the file and the packet) on anything it cannot read.
func ReadTrace(t testing.TB, path string) []Packet {
	t.Helper()
	raw := ReadAll(t, path)
	out := make([]Packet, 0, len(raw))
	for i, p := range raw {
		info, err := tracefile.DecodePacket(p)
		if err != nil {
			t.Fatalf("%s: packet %d: %v", path, i, err)
		}
		out = append(out, Packet{Raw: p, Info: info})
	}
	return out
}

// ScriptedID is the (writer, index) and body of a test packet
// (tracefile.FieldForTesting, its body starting with two little-endian
// uint32), if p is one.
func ScriptedID(p []byte) (w, i int, body []byte, ok bool) {
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
