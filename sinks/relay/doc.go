// Package relay owns the relay sink (the sender) and the relay server
// (what `tracepipe serve` runs) and the wire protocol between them.
//
// The protocol is framed by hand rather than carried by gRPC: a batch is
// already a run of Trace records (see remote.Outbox), so the sender writes
// a 13-byte header and the batch bytes with one writev and the receiver
// appends them to its trace file as they are, with no per-packet message
// encoding, no copy into protobuf messages and no HTTP/2 flow-control
// window between them. TLS comes from crypto/tls, flow control from TCP.
//
// Frames are type:u8 length:u32 (big endian) payload; lengths above
// MaxFrame are refused before anything is allocated, so a connection never
// holds more than one frame of memory. The sender opens with a versioned
// hello (machine id, session id, hostname); the receiver answers with the
// last batch it has stored for that session, and the sender resends what
// follows it. Every stored batch is acknowledged; the sender keeps at most
// its queue bound of unacknowledged batches and counts what did not fit.
//
// From protocol version 3 the connection also carries clock
// synchronisation (clocksync.go): rounds of sender and receiver clock
// snapshots taken ping-pong, at the start of each connection and
// periodically, which a merging receiver writes as remote_clock_sync
// packets (docs/multi-machine.md).
//
// The package never trusts the peer: every frame is checked (type, length,
// Trace framing of batches) and a bad one ends the connection with an
// error naming the offset; it never panics on input.
//
// The server bounds what any peer can make it hold or wait for
// (budget.go): deadlines on the hello, between frames, inside a frame and
// on every write; per-type frame sizes; one frame-memory budget shared by
// all connections; a connection cap at which the connection idle longest
// makes room. Each limit is counted in ServerStats and logged once. It
// must never hold a connection's memory or goroutine past those bounds,
// nor let one connection stall another.
package relay
