// Package perfettosvc is the Perfetto consumer service: what Perfetto's
// consumers (the perfetto command, trace_processor's recorder) reach on
// tracepipe's consumer socket as perfettoipc.ConsumerBackend. It owns the
// consumer's view of a session: EnableTracing (a TraceConfig mapped by
// pipeline.ConfigFromTraceConfig, refused over the consumers' memory
// bound), deferred StartTracing, DisableTracing, Flush, ReadBuffers
// through a bounded in-memory sink or write_into_file through the
// consumer's file descriptor, GetTraceStats, ObserveEvents,
// ChangeTraceConfig (producer filters only, as traced), CloneSession and
// QueryServiceState; what the sessions may hold on the Go heap, as a
// soft memory limit that follows them (heap.go, SetHeapLimit); and Serve,
// the whole service on Perfetto's two sockets, which `tracepipe serve
// --perfetto` and tracepiped run.
//
// It is a layer above the session core: each consumer session is an
// ordinary pipeline.Service, built with pipeline.New and driven only
// through pipeline's exported API (Run, FlushWithFlags, Snapshot,
// Observe, TraceStats, TriggerStats, ChangeProducerFilters,
// DisableBeforeStart), the API the CLI uses. It must not reach into a
// session's internals, and package pipeline must not import it. The
// Perfetto producers a session binds belong to the producer transport
// (transport/perfetto.Producers); this package only names them to a
// session (Options.Perfetto), asks them for session ids and lists them
// (QueryServiceState).
package perfettosvc
