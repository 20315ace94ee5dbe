// Package remote owns what the network sinks (relay, nats) share on both
// ends of the wire, independently of the transport:
//
//   - Outbox, the sender side: packets handed to a sink's Write are packed
//     into numbered batches (Trace framing, so a batch is a valid piece of
//     a trace file) and kept in a bounded queue until the destination
//     acknowledges them; a batch that does not fit is dropped and counted,
//     a batch not yet acknowledged is resent after a reconnect.
//   - Store, the receiver side: batches of many senders land in trace
//     files, one per (machine, session) or one merged trace with machine_id
//     set and sequence ids remapped; a small state file per trace records
//     the last batch written so that a receiver killed and restarted
//     suppresses the duplicates its senders resend. A file exists only
//     once a batch came. The Store bounds what a sender can make it hold
//     (sequence ids per merged stream, batch-number window, sessions per
//     machine, disk) and refuses past a bound with an error wrapping
//     ErrRefused; it writes its own account of each session (batches
//     stored, missing, refused) into the trace as a TraceStats receiver
//     section, so that losses on the hop are in the file. A merged file is laid
//     out as Perfetto's multi-machine traces: the receiver's own packets
//     first (it is the host), and per machine the clock-sync rounds its
//     transport measured, as remote_clock_sync (clocksync.go).
//   - Identity: a stable machine id per host, session ids, hostnames.
//
// It knows nothing of sockets, TLS or NATS: transports feed it bytes. It
// must never block a sink's Write and never trust a batch it did not
// validate (batches come from the network).
package remote
