package plugins

import (
	"github.com/tracepipe/tracepipe/internal/registry"
	"github.com/tracepipe/tracepipe/smb"
)

// PacketWriter is one packet sequence as a data source sees it. The
// service-side implementation is smb.TraceWriter, so in-process data sources
// and plugins take the same SMB path.
type PacketWriter interface {
	// WritePacket appends one complete, proto-encoded TracePacket (without the
	// Trace framing) to the sequence.
	WritePacket(packet []byte) error
	// NewTracePacket starts a packet written field by field straight into
	// chunk memory (no intermediate encoding; nested messages' sizes are
	// patched when they end). Finish it (or start the next packet) to
	// commit it. plugins/trackevent builds TrackEvent packets on it.
	NewTracePacket() smb.TracePacket
	// Flush commits whatever the writer holds in a partially written chunk.
	Flush() error
}

// Host is what a running data source may ask of the service.
type Host interface {
	// NewWriter opens a new sequence (one TraceWriter) for this data source.
	NewWriter() (PacketWriter, error)
}

// DataSource is one running instance of a data source. The service calls
// Start once, then any number of Flush and ClearIncrementalState, then Stop.
// Calls are never concurrent with each other.
type DataSource interface {
	// Start begins emitting packets through writers obtained from h. It must
	// not block: long-running work goes in goroutines the data source owns.
	Start(h Host) error
	// Flush commits every packet written so far by all the instance's writers.
	Flush() error
	// ClearIncrementalState asks the data source to re-emit its incremental
	// state (interning tables, descriptors) before it is referenced again.
	ClearIncrementalState()
	// Stop ends emission, flushes every writer and returns once no goroutine
	// of the instance writes any more.
	Stop() error
}

// Factory builds a data source instance from the per-source config section
// (the map under data_sources[i].config, possibly nil).
type Factory func(config map[string]any) (DataSource, error)

var factories = registry.New[Factory]("plugins: data source")

// Register makes a data source available by name. It panics on a duplicate
// name, which is a programming error caught at init time.
func Register(name string, f Factory) { factories.Register(name, f) }

// Lookup returns the factory registered under name.
func Lookup(name string) (Factory, bool) { return factories.Lookup(name) }

// Names lists the registered data sources, sorted.
func Names() []string { return factories.Names() }

// Finite is implemented by data sources that can end on their own (a
// synthetic source with max_packets, a replay of a file). Done is closed
// once the instance has written everything it will ever write. A session
// whose data sources are all Finite stops when all of them are done, even
// before its duration.
type Finite interface {
	Done() <-chan struct{}
}
