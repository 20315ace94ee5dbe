// Package restore owns sequence state restore, tracepipe's answer to a
// ring buffer that wraps: for every sequence of a data source whose
// ProtoVM program serves the "restore" path, a fold of the incremental
// state the sequence wrote since its last SEQ_INCREMENTAL_STATE_CLEARED
// (overwritten and read packets alike), and, ahead of the sequence's
// first packet read after a loss, a restore packet carrying that state
// so trace_processor imports the packets that survived (restore.go). It
// also owns the folds' side of transfer_on_clone (transfer.go: a
// snapshot's copy of the folds and the live folds' adoption of what the
// snapshot read). Which path a program serves, and the check that keeps a
// "perfetto"-path program from destroying events, are config validation
// (protovm_path.go, with the configuration).
//
// The session core (package pipeline) drives it, on its one goroutine:
// it builds a Set per buffer (NewSet, AddProgram), routes the buffer's
// overwritten packets to Observe, and calls Ahead for each packet of a
// restore sequence it reads back, before stamping the trusted fields. A
// snapshot's copy (CloneForSnapshot) is used on the snapshot's goroutine
// only. A Set is never shared between goroutines.
//
// It must not read buffers, own goroutines or timers, or do I/O: it sees
// packets the core hands it, and appends restore packets where the core
// tells it to. Overwritten packets were never validated: a malformed one
// ends its scan (or fails its patch), never a panic.
package restore
