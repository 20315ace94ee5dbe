package perfettoipc

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tracepipe/tracepipe/internal/testsupport"
)

// goldenStreams returns every recorded direction of every capture:
// path → bytes, read in place from shared/golden/perfetto-ipc.
func goldenStreams(t testing.TB) map[string][]byte {
	t.Helper()
	dir := testsupport.GoldenDir(t, "perfetto-ipc")
	paths, err := filepath.Glob(filepath.Join(dir, "*", "*.frames.bin"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no *.frames.bin under %s (%v)", dir, err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = b
	}
	return out
}

func sortedKeys(m map[string][]byte) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Every frame traced and its clients exchanged parses, and the
// deserializer finds the same frames whatever the read sizes.
func TestGoldenFramesDecode(t *testing.T) {
	streams := goldenStreams(t)
	total := 0
	for _, name := range sortedKeys(streams) {
		stream := streams[name]
		payloads, _, err := SplitFrames(stream)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, chunk := range []int{1, 7, 4096, len(stream)} {
			var d Deserializer
			got := 0
			for off := 0; off < len(stream); off += chunk {
				end := min(off+chunk, len(stream))
				if err := d.Feed(stream[off:end]); err != nil {
					t.Fatalf("%s chunk %d: %v", name, chunk, err)
				}
				for {
					f, err := d.Next()
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if f == nil {
						break
					}
					if f.Msg == nil {
						t.Errorf("%s frame %d: no message", name, got)
					}
					got++
				}
			}
			if got != len(payloads) || d.Dropped != 0 || d.Buffered() != 0 {
				t.Fatalf("%s chunk %d: %d frames (want %d), %d dropped, %d bytes left", name, chunk, got, len(payloads), d.Dropped, d.Buffered())
			}
		}
		total += len(payloads)
	}
	if total < 100 {
		t.Fatalf("only %d frames in the captures", total)
	}
}

// The frames this package encodes are byte-identical to traced's (README
// §6 of the captures).
func TestEncodeMatchesTracedBytes(t *testing.T) {
	ok := &Frame{RequestId: u64(4), Msg: &Frame_MsgInvokeMethodReply{MsgInvokeMethodReply: &Frame_InvokeMethodReply{
		Success: boolp(true), HasMore: boolp(false), ReplyProto: []byte{}}}}
	failed := &Frame{RequestId: u64(2), Msg: &Frame_MsgInvokeMethodReply{MsgInvokeMethodReply: &Frame_InvokeMethodReply{HasMore: boolp(false)}}}
	bind := &Frame{RequestId: u64(1), Msg: &Frame_MsgBindService{MsgBindService: &Frame_BindService{ServiceName: strp("ProducerPort")}}}
	for _, tc := range []struct {
		f    *Frame
		want string
	}{
		{ok, "0a000000 1004 3206 0801 1000 1a00"},
		{failed, "06000000 1002 3202 1000"},
		{bind, "12000000 1001 1a0e 0a0c 50726f6475636572506f7274"},
	} {
		b, err := AppendFrame(nil, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := hex.EncodeToString(b), strings.ReplaceAll(tc.want, " ", ""); got != want {
			t.Errorf("encoded %s, traced sent %s", got, want)
		}
	}
}

func TestDeserializerRejectsOversizedFrame(t *testing.T) {
	var d Deserializer
	// 131069 payload bytes: 4 + 131069 > 128 KiB.
	err := d.Feed([]byte{0xfd, 0xff, 0x01, 0x00})
	if err == nil {
		t.Fatal("a frame above 128 KiB was accepted")
	}
	var d2 Deserializer
	if err := d2.Feed([]byte{0xfc, 0xff, 0x01, 0x00}); err != nil { // exactly 128 KiB
		t.Fatalf("a frame of exactly 128 KiB was refused: %v", err)
	}
	// Empty frames are skipped, garbage payloads dropped and counted.
	var d3 Deserializer
	if err := d3.Feed([]byte{0, 0, 0, 0, 2, 0, 0, 0, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if f, err := d3.Next(); f != nil || err != nil || d3.Dropped != 1 || d3.Buffered() != 0 {
		t.Fatalf("got %v %v dropped %d buffered %d", f, err, d3.Dropped, d3.Buffered())
	}
}
