// Package flightrec owns the parts of tracepipe's flight recorder that
// need none of the session core's internals: deciding whether an
// activated trigger acts (Matcher: known name, producer_name_regex,
// skip_probability, max_per_24h, each outcome counted) and the memory a
// clone snapshot is copied into (CloneMem: pre-faulted, outside the Go
// heap, given back at once).
//
// The rest of the flight recorder runs on the session core's event loop
// and lives in package pipeline, in the files named flightrec_*.go:
// snapshot requests, flushes, capture and the copy in steps, the
// snapshot's readback and its destinations (flightrec_snapshot.go),
// transfer_on_clone (flightrec_transfer.go; the restore folds' side is
// package restore), what a trigger that acted does to the session
// (flightrec_triggers.go) and file rotation (flightrec_rotate.go).
//
// It must not import the session core, read buffers, or own goroutines
// or timers; a Matcher is safe for concurrent use and never blocks for
// long, since triggers arrive from producers, the CLI, signals and HTTP.
package flightrec
