// Package sinks owns where packets go after readback: the Sink interface,
// the registry of sink types, the lanes that run each sink on its own
// goroutine behind its own bounded queue, the streaming file sink (valid
// at every packet boundary, rotation, compression, resuming after a full
// disk) and packet filters (Filter: which packets pass unevaluated, and
// the counting; the CEL expressions themselves are compiled by
// sinks/celfilter, which a program hands over with UseFilterCompiler, so
// that one taking no filters does not link CEL).
//
// It knows nothing of buffers or producers, and must never make a
// producer wait: a sink either writes, or drops and counts.
//
// # Adding a sink type
//
// A sink type is a name and a Factory, registered from an init function:
//
//	func init() { sinks.Register("nats", natsFactory) }
//
//	// natsFactory decodes sinks[i].nats: {...}. It must be pure (no I/O).
//	func natsFactory(m map[string]any) (sinks.Builder, error) {
//		sec := sinks.NewSection(m)
//		b := &natsBuilder{url: sec.String("url", ""), subject: sec.String("subject", "")}
//		if b.url == "" {
//			sec.Bad("url", "required")
//		}
//		if err := sec.Err(); err != nil { // FieldErrors, unknown keys included
//			return nil, err
//		}
//		return b, nil
//	}
//
// The Builder names its destination (for the run summary) and opens the
// Sink when the session starts (Builder.Open, given an Env with the
// session uuid and a logger). The Sink interface (Write, Flush, Close,
// Stats) is the whole contract with the pipeline; see [Sink]. A running
// session opens each sink once more per clone snapshot, with
// Env.Snapshot set: the snapshot is a trace of its own (see [Snapshot]).
//
// Configuration problems are FieldErrors (path relative to the section +
// message); the pipeline prefixes them ("sinks[2].nats.url: required").
// Nobody parses error strings.
//
// # Keys every sink has
//
// type, name, filter, filter_error (keep | drop), queue_capacity (batches
// of 256 KiB), when_full (block | drop), on_error (stop | drop): see
// [Config]. The pipeline wraps each sink in a [Lane] that applies them:
// the filter (service packets always pass), the queue and its policy, the
// rate-limited error log, and the TraceStats packet that each sink
// receives with its own counters (and, in peer_sinks, the other sinks that
// lost data or failed).
//
// # Network sinks
//
// A sink whose destination can be away (relay, nats) reports through a
// [Link]: outages logged once each with their cause, drops during an
// outage counted as lost to it, a failure (a permanent cause, or packets
// lost) reported by Failed so that its lane applies on_error, and
// Outage for the status line. See docs/remote-sinks.md.
package sinks
