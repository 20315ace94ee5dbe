// Package pipeline owns a tracing session: the Service that accepts
// CommitData from producers, copies chunks into the trace buffers, runs the
// readback loop, stamps trusted fields and feeds sinks, and the timers for
// flush, incremental-state clearing and duration. Its configuration (types,
// loading, validation, the Perfetto TraceConfig mapping) is package config's;
// New takes a *config.Config (and validates it again). With ProtoVM programs on the
// restore path it also folds each sequence's incremental state and writes a
// restore packet ahead of a sequence's first packet after a loss
// (package restore, driven from the loop: service.go builds the folds and
// routes overwrites to them, readback.go asks for a restore ahead of each
// packet), so ring-wrapped traces import in trace_processor. Its flight
// recorder (clone snapshots, transfer_on_clone, triggers, rotation) runs
// on the same loop, in the files named flightrec_*.go; trigger matching
// and clone memory, which need none of the loop, are package flightrec.
//
// Goroutines of a running Service:
//   - the service goroutine (the caller of Run) owns every TraceBuffer and
//     ProtoVM instance (and every restore fold): commits, patches, scrapes and read passes all run
//     there, one at a time, in one event loop (serveUntil) shared by every
//     phase (recording, final flush, stop, drain);
//   - one control goroutine per producer makes the calls into its
//     Transport (Start, Flush, ClearIncrementalState, Stop; transport.go
//     writes down their lifecycle contract), in this process, over a
//     plugin's gRPC connection or a Perfetto producer's IPC connection,
//     and reports their outcome to the loop as notes; a watcher goroutine reports a Finite source's end or a plugin
//     process's death; the producer runtime (plugins/producer) pushes
//     batched commits; the data source's own goroutines write its packets;
//   - the output goroutine hands read batches to the sinks and flushes them
//     at the end of each pass.
//
// It is the only package that wires the others together; it must not
// re-implement what they own (chunk validation, buffering, encoding), and
// the service goroutine must never wait on a sink or a data source: a
// slow sink makes reads back off (the ring buffer wraps and counts the
// loss), a stuck data source makes its flush time out (counted).
//
// Clients drive sessions through the exported API only: the CLI, and the
// Perfetto consumer service (package perfettosvc, a layer above this
// one, which this package must not import). Two adapters of that API live
// here so that every client shares them: ControlHandler (control.go) serves
// a session's control socket, and Result.ImportRisks (import_risks.go)
// says what a finished session's counters predict for trace_processor's
// import; the wording of either is the client's. Producers reach a session
// through a Transport (package transport): in-process ones
// (transport/inprocess) that the session builds from its config, plugin
// ones that the PluginHost of Options.Plugins builds (transport/goplugin's
// Host: this package must not import go-plugin, so that a program without
// plugins does not link it), and Perfetto producers bound through RemoteProducers
// (remote.go: at the start, and while recording as they register),
// implemented by transport/perfetto, which imports this one.
package pipeline
