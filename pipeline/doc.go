// Package pipeline owns a tracing session: its configuration (koanf: YAML,
// TOML, JSON, TRACEPIPE_ environment overrides and --set flags, validated
// with messages that name the field), the service that accepts CommitData
// from producers, copies chunks into the trace buffers, runs the readback
// loop, stamps trusted fields and feeds sinks, and the timers for flush,
// incremental-state clearing and duration.
//
// It is the only package that wires the others together; it must not
// re-implement what they own (chunk validation, buffering, encoding).
package pipeline
