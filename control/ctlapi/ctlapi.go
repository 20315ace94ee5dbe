// Package ctlapi is what a session implements to be driven from outside
// its process: the Handler its control socket serves (package control's
// Server) and the AlertSession that Alertmanager's webhook drives, with the
// values they exchange. It is apart from package control so that the
// session core (package pipeline) implements both without linking the
// socket's gRPC stack: a binary that serves no control socket (tracepiped)
// stays small. It holds types only; it must not import anything beyond
// the standard library, and it must not validate or serve requests
// (package control does).
package ctlapi

import (
	"context"
	"time"
)

// Info describes a session (the Info reply).
type Info struct {
	Name       string
	ConfigPath string
	Start      time.Time
	Buffers    []BufferInfo
	Losses     uint64 // data_loss counters, RingOverwrites aside
	BytesIn    uint64
	// RingOverwrites counts the chunks a ring buffer read once overwrote
	// (pipeline.Status.RingOverwrites): not a loss, shown apart.
	RingOverwrites uint64
	// MemoryBytes: the session's buffers, SMBs, snapshot clones and output batches.
	MemoryBytes uint64
	// Snapshot counters.
	SnapshotsTaken, SnapshotsFailed, SnapshotsRefused uint64
}

// BufferInfo is one buffer's fill.
type BufferInfo struct {
	Name string
	Size uint64
	Fill float64
}

// SnapshotResult is what a snapshot wrote.
type SnapshotResult struct {
	Number  int
	Files   []string
	Packets uint64
	Bytes   uint64
	Pause   time.Duration
}

// Handler is the session behind a Server. Its methods are called on the
// server's goroutines, concurrently; requests are validated first.
type Handler interface {
	Info() Info
	Trigger(names []string) (acted []string, ignored int)
	Snapshot(ctx context.Context, path, trigger string) (SnapshotResult, error)
	Rotate() (closed []string, err error)
	Stop()
}

// TriggerNamer is a Handler that knows its session's trigger names
// (trigger_config.triggers): the server then refuses a Trigger request
// naming any other, before activating one, with an error naming it.
type TriggerNamer interface {
	TriggerNames() []string
}

// AlertSession is the session the Alertmanager webhook drives
// (pipeline.Service implements it). The webhook calls it from its HTTP
// handlers' goroutines, so every method must be safe for concurrent use
// and must not block on the session's loop for long.
type AlertSession interface {
	// ActivateTriggers activates the named triggers of the session's
	// trigger_config on behalf of producer and returns those that acted.
	ActivateTriggers(producer string, names ...string) (acted []string)
	// TriggersRefused records (counts and logs) the triggers a
	// notification named that did not act.
	TriggersRefused(source string, names []string)
	// AlertRequestRefused records a request refused before its triggers
	// reached the session (see AlertOptions.Refused).
	AlertRequestRefused(peer string, status int, why error)
}
