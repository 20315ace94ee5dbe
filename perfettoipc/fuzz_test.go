package perfettoipc

import (
	"testing"
)

// addGoldenSeeds adds every golden stream, whole and per frame, to f.
func addGoldenSeeds(f *testing.F, each func(payload []byte)) {
	streams := goldenStreams(f)
	for _, name := range sortedKeys(streams) {
		payloads, _, err := SplitFrames(streams[name])
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range payloads {
			each(p)
		}
	}
}

// FuzzDeserializer feeds arbitrary bytes in arbitrary pieces: no panic,
// never more than one frame plus one piece buffered, every frame it
// returns re-encodes within the size bound.
func FuzzDeserializer(f *testing.F) {
	streams := goldenStreams(f)
	for _, name := range sortedKeys(streams) {
		s := streams[name]
		f.Add(s[:min(len(s), 4096)], uint16(61))
	}
	f.Fuzz(func(t *testing.T, data []byte, piece uint16) {
		step := int(piece%4096) + 1
		var d Deserializer
		for off := 0; off < len(data); off += step {
			if err := d.Feed(data[off:min(off+step, len(data))]); err != nil {
				return
			}
			for {
				fr, err := d.Next()
				if err != nil {
					return
				}
				if fr == nil {
					break
				}
				if _, err := AppendFrame(nil, fr); err != nil {
					t.Fatalf("decoded frame does not re-encode: %v", err)
				}
			}
			if d.Buffered() > MaxFrameSize+step {
				t.Fatalf("%d bytes buffered", d.Buffered())
			}
		}
	})
}
