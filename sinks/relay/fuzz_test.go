package relay

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/sinks/remote"
)

func seedHello() []byte {
	h := appendHello(nil, Hello{Version: MinProtocolVersion, ID: remote.Identity{Machine: 42, Session: [16]byte{1, 2, 3}, Hostname: "host-a"}})
	return h[frameHeaderSize:]
}

func seedBatch() []byte {
	b := appendSeqFrame(nil, frameBatch, 1)[frameHeaderSize:]
	b = append(b, 0x0a, 0x02, 0x40, 0x01)
	return b
}

// FuzzDecodeHello: any hello payload decodes or fails with an error, and
// a decoded one re-encodes to the same bytes.
func FuzzDecodeHello(f *testing.F) {
	f.Add(seedHello())
	f.Add([]byte("TPRL"))
	snap := remote.Identity{Machine: 42, Session: [16]byte{4}, Hostname: "host-a", Snapshot: sinks.Snapshot{Of: [16]byte{1, 2, 3}, N: 2, Trigger: "slow_frame"}}
	f.Add(appendHello(nil, Hello{Version: 2, ID: snap})[frameHeaderSize:])
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := DecodeHello(p)
		if err != nil {
			return
		}
		if again := appendHello(nil, h)[frameHeaderSize:]; !bytes.Equal(again, p) {
			t.Fatalf("hello %x re-encodes as %x", p, again)
		}
	})
}

// FuzzDecodeBatch: any batch payload decodes or fails; the records of a
// decoded one add up to its length.
func FuzzDecodeBatch(f *testing.F) {
	f.Add(seedBatch())
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1, 0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, p []byte) {
		_, recs, packets, nbytes, err := DecodeBatch(p)
		if err != nil {
			return
		}
		if packets < 0 || nbytes > uint64(len(recs)) {
			t.Fatalf("%d packets of %d bytes in %d record bytes", packets, nbytes, len(recs))
		}
	})
}

// FuzzServerConn feeds arbitrary bytes to a server connection as a
// sender would send them: the server must end the connection (error or
// EOF) without panicking, hanging or storing a malformed batch.
func FuzzServerConn(f *testing.F) {
	hello := appendHello(nil, Hello{Version: MinProtocolVersion, ID: remote.Identity{Machine: 42, Hostname: "h"}})
	f.Add(append(append([]byte{}, hello...), appendSeqFrame(nil, frameBatch, 1)...))
	good := append([]byte{}, hello...)
	good = appendFrameHeader(good, frameBatch, len(seedBatch()))
	good = append(good, seedBatch()...)
	f.Add(good)
	snap := appendHello(nil, Hello{Version: 2, ID: remote.Identity{Machine: 42, Hostname: "h",
		Snapshot: sinks.Snapshot{Of: [16]byte{7}, N: 1, Trigger: "t"}}})
	f.Add(append(snap, good[len(hello):]...))
	f.Add([]byte{frameBatch, 0xff, 0xff, 0xff, 0xff})
	// A clock-sync round (version 3), then a batch; and an update alone.
	clocks := remote.ReadClocks(nil)
	round := appendClockSync(appendClockSync(append([]byte{}, hello...), 1, phasePing, clocks), 1, phaseUpdate, clocks)
	f.Add(append(round, good[len(hello):]...))
	f.Add(appendClockSync(append([]byte{}, hello...), 1, phaseUpdate, clocks))
	f.Add(append(appendFrameHeader(nil, frameHello, 1<<20), "TPRL"...))                    // a hello announcing 1 MiB
	f.Add(append(append([]byte{}, hello...), appendSeqFrame(nil, frameBatch, 1<<64-1)...)) // batch 2^64-1
	f.Fuzz(func(t *testing.T, in []byte) {
		// Merging, so that rounds are written (remote_clock_sync).
		store, err := remote.OpenStore(t.TempDir(), true)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		srv := NewServer(ServerOptions{Store: store, FrameTimeout: time.Second, IdleTimeout: time.Second})
		client, server := net.Pipe()
		go io.Copy(io.Discard, client)
		done := make(chan error, 1)
		go func() { done <- srv.handle(server, &connInfo{}) }()
		client.SetWriteDeadline(time.Now().Add(5 * time.Second))
		client.Write(in)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("server connection did not end")
		}
		server.Close()
		if used := srv.FrameMemoryUsed(); used != 0 {
			t.Fatalf("the connection ended holding %d bytes of frame memory", used)
		}
	})
}

// FuzzServerReader: the server's frame reader, on any bytes, returns
// frames no larger than their type's limit, charges the budget for what
// it holds and gives all of it back.
func FuzzServerReader(f *testing.F) {
	f.Add(appendHello(nil, Hello{Version: 1, ID: remote.Identity{Machine: 1, Hostname: "h"}}))
	f.Add(append(appendFrameHeader(nil, frameBatch, 9), seedBatch()[:9]...))
	f.Add(appendFrameHeader(nil, frameError, maxErrorText+1))
	f.Add(appendFrameHeader(nil, 200, 10))
	f.Fuzz(func(t *testing.T, in []byte) {
		budget := newMemBudget(4 << 20)
		client, server := net.Pipe()
		go func() {
			client.SetWriteDeadline(time.Now().Add(5 * time.Second))
			client.Write(in)
			client.Close()
		}()
		sr := newServerReader(server, budget, time.Second)
		for range 64 {
			typ, p, err := sr.next()
			if err != nil {
				break
			}
			if uint32(len(p)) > frameLimit(typ) {
				t.Fatalf("frame of type %d and %d bytes passed its limit %d", typ, len(p), frameLimit(typ))
			}
			if len(p) > maxSmallFrame && budget.Used() < int64(len(p)) {
				t.Fatalf("a %d-byte frame held with %d bytes charged", len(p), budget.Used())
			}
		}
		sr.release()
		server.Close()
		if budget.Used() != 0 {
			t.Fatalf("%d bytes still charged after release", budget.Used())
		}
	})
}

// FuzzSenderConn plays a receiver that answers with arbitrary bytes: the
// sink must not panic or hang, and must never count a packet as written
// that a well-formed ack of a batch it sent did not cover.
func FuzzSenderConn(f *testing.F) {
	f.Add(appendSeqFrame(appendHelloAck(nil, 0), frameAck, 1))
	f.Add(appendSeqFrame(appendHelloAck(nil, 0), frameAck, 99))
	f.Add(appendHelloAck(nil, 7))
	f.Add(appendErrorFrame(nil, "no"))
	f.Add([]byte{frameAck, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1})
	// Clock sync (version 3): the pong of the first round, of a round
	// never started, and of the wrong size.
	f.Add(appendSeqFrame(appendClockPong(appendHelloAck(nil, 0), 1), frameAck, 1))
	f.Add(appendClockPong(appendHelloAck(nil, 0), 9))
	f.Add(append(appendFrameHeader(appendHelloAck(nil, 0), frameClockPong, 1), 1))
	f.Fuzz(func(t *testing.T, answer []byte) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					c.SetDeadline(time.Now().Add(2 * time.Second))
					go io.Copy(io.Discard, c)
					c.Write(answer)
				}()
			}
		}()
		s, err := New(Options{Address: ln.Addr().String(), Identity: remote.Identity{Machine: 1, Hostname: "f"},
			BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond, DialTimeout: 200 * time.Millisecond, CloseTimeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		s.Write(context.Background(), [][]byte{{0x40, 0x01}})
		s.Flush(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
		st := s.Stats()
		if st.PacketsWritten+st.PacketsDropped() != 1 {
			t.Fatalf("1 packet written, stats %+v", st)
		}
	})
}
