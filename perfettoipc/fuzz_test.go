package perfettoipc

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/smb"
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

// producerCalls encodes a call sequence for FuzzProducerPort: per call a
// method byte, a 2-byte little-endian length and the args.
func producerCalls(calls ...[]byte) []byte { return bytesJoin(calls) }

func bytesJoin(parts [][]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func producerCall(method uint32, args []byte) []byte {
	return append([]byte{byte(method), byte(len(args)), byte(len(args) >> 8)}, args...)
}

// FuzzProducerPort drives a producer's handler with any sequence of
// method calls and argument bytes (seeded with every invoke traced_probes
// and the SDKs sent in the captures): no panic, every method's argument
// decoding either succeeds or fails cleanly, state stays bounded.
func FuzzProducerPort(f *testing.F) {
	var seeds [][]byte
	addGoldenSeeds(f, func(payload []byte) {
		var fr Frame
		if proto.Unmarshal(payload, &fr) != nil {
			return
		}
		if inv := fr.GetMsgInvokeMethod(); inv != nil && len(inv.GetArgsProto()) < 1<<16 {
			seeds = append(seeds, producerCall(inv.GetMethodId(), inv.GetArgsProto()))
		}
	})
	init := producerCall(mInitializeConnection, []byte{0x1a, 0x01, 'p'})
	for i, s := range seeds {
		f.Add(producerCalls(init, s, seeds[(i+1)%len(seeds)]))
	}
	h := NewHost()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := &Producer{conn: &Conn{host: h, fd: -1}, backend: nopBackend{}}
		defer p.Close()
		for len(data) >= 3 {
			m := uint32(data[0]) % 14
			n := int(data[1]) | int(data[2])<<8
			data = data[3:]
			n = min(n, len(data))
			args := data[:n]
			data = data[n:]
			if _, err := DecodeProducerArgs(m, args); err == nil && (m < 1 || m > 12) {
				t.Fatalf("method %d decoded", m)
			}
			p.Invoke(m, &Call{conn: p.conn, Args: args, dropReply: true})
			if len(p.dataSources) > maxDataSources || len(p.writers) > maxRegisteredWriter {
				t.Fatalf("%d data sources, %d writers", len(p.dataSources), len(p.writers))
			}
		}
	})
}

type nopBackend struct{}

func (nopBackend) Connected(*Producer)                                   {}
func (nopBackend) Disconnected(*Producer)                                {}
func (nopBackend) DataSourceRegistered(*Producer, *DataSourceDescriptor) {}
func (nopBackend) DataSourceUnregistered(*Producer, string)              {}
func (nopBackend) Commit(*Producer, []byte, *smb.CommitData)             {}
func (nopBackend) DataSourceStarted(*Producer, uint64)                   {}
func (nopBackend) DataSourceStopped(*Producer, uint64)                   {}

// FuzzConsumerArgs decodes any bytes as each ConsumerPort method's
// arguments (seeded with the perfetto command's invokes from the
// captures): no panic; methods tracepipe serves either decode or fail.
func FuzzConsumerArgs(f *testing.F) {
	addGoldenSeeds(f, func(payload []byte) {
		var fr Frame
		if proto.Unmarshal(payload, &fr) != nil {
			return
		}
		if inv := fr.GetMsgInvokeMethod(); inv != nil {
			f.Add(uint8(inv.GetMethodId()), inv.GetArgsProto())
		}
	})
	f.Fuzz(func(t *testing.T, method uint8, args []byte) {
		m, err := DecodeConsumerArgs(uint32(method), args)
		if err == nil && m != nil {
			if _, err := proto.Marshal(m); err != nil {
				t.Fatalf("decoded args do not re-encode: %v", err)
			}
		}
	})
}

// FuzzConsumerPort drives a consumer's handler with any sequence of
// method calls and argument bytes (seeded with the perfetto command's
// invokes from the captures) against a session that holds packets: no
// panic, whatever the order (ReadBuffers before EnableTracing, Attach of
// garbage keys, Detach twice...).
func FuzzConsumerPort(f *testing.F) {
	var seeds [][]byte
	addGoldenSeeds(f, func(payload []byte) {
		var fr Frame
		if proto.Unmarshal(payload, &fr) != nil {
			return
		}
		if inv := fr.GetMsgInvokeMethod(); inv != nil && len(inv.GetArgsProto()) < 1<<16 {
			seeds = append(seeds, producerCall(inv.GetMethodId(), inv.GetArgsProto()))
		}
	})
	for i, s := range seeds {
		f.Add(producerCalls(s, seeds[(i+1)%len(seeds)], seeds[(i+2)%len(seeds)]))
	}
	h := NewHost()
	f.Fuzz(func(t *testing.T, data []byte) {
		sess := &fakeSession{pkts: [][]byte{{1, 2, 3}, make([]byte, 40<<10)}, done: make(chan struct{})}
		defer sess.end() // a detached session ends too
		svc := NewConsumerPort(sessionBackend{sess})
		c := svc.Open(&Conn{host: h, fd: -1}).(*consumer)
		for len(data) >= 3 {
			m := uint32(data[0]) % 17
			n := min(int(data[1])|int(data[2])<<8, len(data)-3)
			args := data[3 : 3+n]
			data = data[3+n:]
			c.Invoke(m, &Call{conn: c.conn, Args: args, dropReply: true})
		}
		c.Close()
	})
}

// FuzzParseInvoke checks the in-place InvokeMethod reader against the
// generated decoder on any payload (seeded with the captures' frames):
// whatever it takes, the generated code decodes to the same request id,
// service, method, arguments and drop_reply.
func FuzzParseInvoke(f *testing.F) {
	addGoldenSeeds(f, func(payload []byte) { f.Add(payload) })
	f.Fuzz(func(t *testing.T, payload []byte) {
		var v invokeView
		if !parseInvoke(payload, &v) {
			return
		}
		var fr Frame
		if err := proto.Unmarshal(payload, &fr); err != nil {
			t.Fatalf("taken in place, refused by the generated decoder: %v", err)
		}
		inv := fr.GetMsgInvokeMethod()
		if inv == nil || fr.GetRequestId() != v.requestID || inv.GetServiceId() != v.serviceID || inv.GetMethodId() != v.method ||
			!bytes.Equal(inv.GetArgsProto(), v.args) || inv.GetDropReply() != v.dropReply {
			t.Fatalf("in place %+v, generated %v", v, &fr)
		}
	})
}
