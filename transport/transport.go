// Package transport holds the producer-transport contract: the
// Transport interface through which a session (package pipeline) drives
// each data source instance, the Link through which a transport hands the
// session commits, and Sequenced for transports whose commands must leave
// in session order. It is a leaf: the session core and every transport
// (transport/inprocess, transport/goplugin, transport/perfetto) import it,
// so that a transport the session builds itself needs no import of
// pipeline. It holds no implementation and must not grow one.
package transport

import (
	"time"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// Transport is how the session reaches one producer's data source instance:
// the data source running in this process (transport/inprocess), in a
// go-plugin process (transport/goplugin), or in a Perfetto producer
// connected over IPC (transport/perfetto, bound through
// pipeline.RemoteProducers). The session core drives every instance
// through this interface and nothing else; what differs between the three
// is only how a command travels and how commits come back.
//
// Lifecycle, as the session calls it:
//
//  1. Start(link) once, on the producer's control goroutine. It returns
//     once the data source runs (or failed to). It may block — a plugin's
//     launch and handshake, a Perfetto producer's NotifyDataSourceStarted —
//     but the session does not wait for it: a Start that has not returned
//     after the session's start timeout (10s) is a start failure, and the
//     session calls Close, which must make a blocked Start return. Before
//     anything it starts can commit, Start calls link.SetPID if the
//     instance runs in a process the service itself started (the pid
//     stamped on its packets as trusted).
//  2. Flush and ClearIncrementalState, any number of times, one at a time,
//     on the control goroutine, only after Start returned nil. Flush(id)
//     promises: everything the data source wrote before the call is
//     committed, then a CommitData whose flush_request_id is id is
//     delivered after those commits (an error: no such acknowledgement
//     will come; the session counts the flush as timed out). A Flush may
//     block up to the transport's own bound (a Perfetto producer's
//     acknowledgement wait); the session's flush_timeout_ms does not wait
//     for it. ClearIncrementalState is a request: it does not wait.
//  3. Stop at most once, on the control goroutine, after Start returned
//     nil (a failed Start is never followed by Stop; a stop asked for
//     while Start runs waits for it). It returns when the data source
//     stopped and its last commits were delivered. The session waits up to its stop
//     timeout (5s, Perfetto's default), then calls Close and scrapes the
//     SMB as it is; Stop then returns whenever it does, its result unused.
//  4. Close, on the service goroutine, at the end of the session (after
//     Stop returned or timed out) and earlier when Start or Stop overran
//     its bound. It releases at once what the instance still holds (kills
//     a plugin process still running; unbinds a Perfetto instance from its
//     connection) and may run while Start or Stop is blocked on the control
//     goroutine. It may be called more than once and must not block beyond
//     a short bounded wait.
//
// PacketsDropped, Done, Exited and ExitErr may be called from any
// goroutine after Start returned; they must not block (ExitErr: a short
// bounded wait for an exit status at most).
//
// A death is the instance going away without being stopped (a plugin
// process that exited or was killed, a Perfetto producer that
// disconnected): Exited is closed and ExitErr then says why, in words the
// session logs after the producer's label. The session marks the producer
// dead, keeps what it committed, scrapes its SMB and may restart it
// (restart_on_crash). An instance that cannot die returns a nil Exited.
// Done, in contrast, is an ordinary end: closed when the data source said
// it wrote everything it will (plugins.Finite); nil if it never says so.
//
// Commits reach the service as encoded CommitData bytes, handed to
// link.Deliver from whatever goroutine the transport receives them on
// (the producer runtime's, a gRPC stream's, an IPC connection's). The
// service decodes and validates every one as untrusted input, on the
// service goroutine, in delivery order. Deliver blocks while the service's
// commit queue is full (backpressure on that producer alone), never after
// the session ended.
type Transport interface {
	// Start starts the data source instance; see the lifecycle above.
	Start(link Link) error
	// Flush makes the data source commit everything it wrote, then
	// delivers a CommitData acknowledging flushID; flags say why.
	Flush(flushID uint64, flags plugins.FlushFlags) error
	// ClearIncrementalState asks the data source to emit its incremental
	// state afresh. It does not wait for it.
	ClearIncrementalState()
	// Stop stops the data source and delivers its last commits.
	Stop() error
	// PacketsDropped counts packets lost to a full SMB, as far as the
	// service can know (0 where the producer's own counter is untrusted:
	// its losses show in its chunks).
	PacketsDropped() uint64
	// Done is closed when the data source ended on its own (nil: never).
	Done() <-chan struct{}
	// Exited is closed when the instance is gone without being stopped;
	// nil if it cannot happen. ExitErr then says why.
	Exited() <-chan struct{}
	ExitErr() error
	// Close releases at once what the instance still holds; see the
	// lifecycle above.
	Close()
}

// Link is a transport's handle on its producer in the session: the little
// the transport may tell the service. The session hands it to Start (and
// to Sequenced.Setup); its methods are safe from any goroutine.
type Link interface {
	// SetPID records the pid of the process the service itself started
	// for this instance: the trusted pid stamped on its packets from now
	// on, whatever the process reports.
	SetPID(pid int32)
	// Deliver hands one encoded CommitData to the service (see
	// Transport). The service owns data from now on and may recycle it
	// through CommitBuffer.
	Deliver(data []byte)
	// CommitBuffer returns a recycled buffer to encode the next
	// CommitData into (length 0), or nil when none is free: with it the
	// steady state of a transport's commit path allocates nothing.
	CommitBuffer() []byte
}

// Sequenced is implemented by a Transport whose commands must leave in
// session order, as Perfetto's: every instance's setup before any start,
// and the stops in order. On the service goroutine, before the control
// goroutines' Start, the session calls Setup for every such instance, then
// Begin for each; before their Stop, SendStop for each that runs. None of
// them may block (commands are queued, not waited for). An instance added
// to a running session gets Start only, which must then do both.
type Sequenced interface {
	Setup(link Link) error // an error is Start's to report
	Begin()
	SendStop()
}

// PluginConfig is what a session knows of a data source instance that
// runs in a plugin executable, for the plugin host that runs it
// (transport/goplugin's Host, reached through pipeline.Options.Plugins).
type PluginConfig struct {
	Index int    // data_sources[Index]
	Name  string // the data source name
	Path  string // the plugin executable
	Label string // how messages name it: "data_sources[i] (path)"
	// DataSourceConfig is data_sources[i].config, passed to the plugin.
	DataSourceConfig  map[string]any
	SMBSize, PageSize int
	TargetBuffer      uint32 // the target_buffer of its commits
	Policy            smb.BufferExhaustedPolicy
	// MemoryLimit and CPULimit bound its processes (data_sources[i].limits;
	// 0: the host's defaults).
	MemoryLimit int64
	CPULimit    time.Duration
	// StderrLineRate and StderrByteRate bound what of its stderr is
	// logged (per second, with a burst of 10 s); the rest is counted.
	StderrLineRate, StderrByteRate float64
	Logf                           func(string, ...any) // its stderr lines; nil: not logged
	// OnTriggers receives the triggers the data source activates, from
	// any goroutine.
	OnTriggers func(names []string)
}
