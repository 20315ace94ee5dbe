// Package natsink owns the nats sink, which publishes packet batches to a
// NATS JetStream subject, and the Reader that `tracepipe serve
// --from-nats` uses to turn a subject back into trace files.
//
// A batch is one message: its data is a run of Trace records (valid trace
// file bytes), its headers name the sender (Tracepipe-Machine,
// Tracepipe-Host, Tracepipe-Session, Tracepipe-Seq) and carry Nats-Msg-Id
// = session uuid + "-" + batch number, so that a batch published again
// after a lost acknowledgement is stored once (within the stream's
// duplicate window). The sink keeps unacknowledged batches in a bounded
// remote.Outbox; what does not fit is dropped and counted.
//
// The Reader consumes through a durable consumer (it resumes where it
// stopped) and writes through remote.Store, which suppresses batches it
// already stored. It treats every message as untrusted: headers are
// parsed strictly, data must be well-formed Trace records, and a bad
// message is acknowledged, counted and skipped (never retried forever).
package natsink
