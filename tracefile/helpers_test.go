package tracefile

import (
	"encoding/hex"
	"strings"
	"testing"
)

// unhex parses space-separated hex as used in test-vectors.md.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// samplePackets returns packets of assorted sizes, including empty and
// multi-byte-length ones.
func samplePackets() [][]byte {
	var out [][]byte
	for _, n := range []int{0, 1, 3, 127, 128, 300, 16384, 70000} {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*7 + n)
		}
		out = append(out, p)
	}
	return out
}

func encodeTrace(pkts [][]byte) []byte {
	var b []byte
	for _, p := range pkts {
		b = AppendRecord(b, p)
	}
	return b
}
