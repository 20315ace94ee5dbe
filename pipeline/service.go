package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/restore"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/smb"
	"github.com/tracepipe/tracepipe/tracefile"
)

// Options tune a Service beyond its Config.
type Options struct {
	// Sinks, when non-nil, replace the sinks built from Config.Sinks
	// (for embedding and tests). The service closes them when it stops.
	Sinks []sinks.Sink
	// OnPassWritten, if set, is called each time every sink's lane is
	// done with a read pass: written and flushed (so the packets are in
	// the OS's hands: a kill -9 of this process no longer loses them), or
	// counted as dropped by a lane with when_full: drop. It runs on the
	// goroutine of the last lane to finish, one call at a time, in pass
	// order.
	OnPassWritten func(PassInfo)
	// Logger receives warnings (a data source that failed to stop, a sink
	// error). Nil discards them.
	Logger *slog.Logger
	// SnapshotSink, if set, opens one more destination for each clone
	// snapshot (n: its number, trigger: its trigger's name), besides the
	// files next to the file sinks (flightrec_snapshot.go). For
	// embedding and tests.
	SnapshotSink func(n int, trigger string) (sinks.Sink, error)
	// OnCloneTrigger, if set, is called (from any goroutine, stop_delay
	// after the trigger acted) for each clone_snapshot trigger instead of
	// the service taking the snapshot itself: a Perfetto consumer's
	// session tells its consumer (TYPE_CLONE_TRIGGER_HIT), which clones.
	OnCloneTrigger func(CloneTriggerHit)
	// TracingSessionID is the session's id for Perfetto producers, when
	// a Perfetto consumer's session has one already (0: made on first use).
	TracingSessionID uint64
	// MaxInstances bounds the session's data source instances, Perfetto
	// producers that join while it records included (remote.go); 0, or
	// more than DefaultMaxInstances: DefaultMaxInstances.
	MaxInstances int
	// TriggerSeed seeds skip_probability's random draws (0: random), so
	// that tests can reproduce them.
	TriggerSeed uint64
	// Rotatable lets file sinks rotate on demand (Service.Rotate) even
	// without rotate_period; `tracepipe run` sets it for its control socket.
	Rotatable bool
	// MaxMemory bounds what the session may map for its buffers and its
	// data sources' SMBs (Config.FixedMemory): New refuses a config over
	// it. 0: the machine's RAM; negative: no bound.
	MaxMemory int64
	// Plugins runs the data sources that name a plugin executable, and
	// finds in plugin_dir the plugins that serve the others; nil: none
	// runs, and a config with a plugin data source is refused with an
	// error naming it.
	Plugins PluginHost
	// Perfetto, when non-nil, serves data sources that are neither built
	// in nor plugins with the Perfetto producers connected to it
	// (transport/perfetto).
	Perfetto RemoteProducers
}

// PassInfo describes the output after a read pass was written.
type PassInfo struct {
	Passes  uint64 // read passes written so far
	Packets uint64 // packets handed to the sinks so far (all sinks see the same packets)
	Bytes   uint64
	Final   bool // the last pass of the session
}

// sinkCloseTime bounds the wait for the sinks at the end of a session:
// for a blocked lane to take the last batches, then for every sink to
// close (all at once). A variable so that tests can shorten it.
var sinkCloseTime = 30 * time.Second

// Stop and timing defaults that the config does not expose.
const (
	startTimeout    = 10 * time.Second
	stopTimeout     = 5 * time.Second // Perfetto's data_source_stop_timeout_ms default
	commitQueueLen  = 256
	readBatchTarget = 256 << 10 // bytes of packets per output batch: small enough to stay in cache between the service and the output goroutine
	outputBatches   = 4         // besides the lanes' queues: the ring buffer, not the output stage, holds what sinks have not taken
	// earlyReadBytes: in streaming mode a buffer holding this much unread
	// data (or an eighth of its size, if less) is read at once instead of
	// at the next file_write_period, so that bursts find room in the ring.
	earlyReadBytes = 8 << 20
)

// Service runs one tracing session: it owns the trace buffers (on the
// goroutine that calls Run), the producers of every data source instance,
// and the output stage that feeds the sinks.
//
// Lifecycle (reference/service.md §3): New builds everything and checks
// the config; Run starts the data sources, serves commits, flushes,
// clears incremental state and reads back on its timers, and at the end
// (duration, ctx cancelled) performs a final flush, stops the data
// sources, scrapes their SMBs, does a final read pass with a TraceStats
// packet and closes the sinks.
type Service struct {
	cfg  *config.Config
	opts Options
	uid  int32
	pid  int32

	buffers []*bufferState // the trace buffers, in config order (bufferState below)

	// Each group below is owned by the file its comment names: the
	// fields are promoted, so that file's code reads s.field, and a
	// reader finds who writes a field by its group.
	producerSet    // the data sources' producers, their commits and lifecycle (producer.go, restart.go)
	loopState      // the event loop's phase, timers and stop conditions (loop.go)
	flushState     // the flush in flight (flush.go)
	readState      // sequence ids and the packet being read (readback.go)
	statsState     // counters and what the service writes itself (servicepackets.go)
	outputStage    // batches on their way to the sink lanes (fanout.go)
	flightRecorder // clone snapshots and triggers (flightrec_snapshot.go, flightrec_triggers.go)
	loopCalls      // calls from other goroutines (loopcall.go)

	status  statusCell // the published status line (status.go)
	refused refusals   // requests from outside turned down (refusals.go)
	ran     bool       // Run was called (service.go)
}

// producerSet holds the producers and what reaches the loop from them
// (producer.go; restarts: restart.go; producers of a remote
// registry such as Perfetto's: remote.go).
type producerSet struct {
	producers []*producer
	remote    RemoteSession // its identity for Perfetto producers (nil: none yet)
	// joinable are the data_sources indices remote producers serve: a
	// producer that registers one while the session records joins it
	// (remote.go, joinLate). joinC is RemoteProducers.Changed as of the
	// last pass; started: startProducers ran.
	joinable []int
	joinC    <-chan struct{}
	joinedAt time.Time // the last pass (joinInterval)
	started  bool
	// joinsRefused: a joiner found the session full (maxInstances; logged once).
	joinsRefused bool
	// instances is len(producers), for other goroutines
	// (DataSourceInstances).
	instances atomic.Int64

	commits  chan commitMsg
	notes    chan note     // producers' lifecycle reports
	finished chan struct{} // closed when Run stops accepting commits

	// neverStart: the session was disabled before it started
	// (DisableBeforeStart); Run starts no data source.
	neverStart      bool
	allStarted      bool
	startErrs       []error        // data sources that failed to start, in order
	abort           error          // a start failure with on_start_error: abort
	restartC        chan *producer // dead plugins whose restart backoff elapsed
	restartsPending int
}

// loopState is the event loop's own state (loop.go), on the service
// goroutine.
type loopState struct {
	timers loopTimers
	phase  int
	// stopRecording fires when the duration elapsed or Run's ctx ended;
	// recordingStopped records that it did.
	stopRecording    <-chan struct{}
	recordingStopped bool
	sinkStopped      bool // sinkStop was seen (a sink with on_error: stop failed)
	readSoon         bool
	start            time.Time
}

// flushState is the flush in flight and the final flush's outcome
// (flush.go), on the service goroutine.
type flushState struct {
	flush   *pendingFlush
	flushID uint64
	// finalFlushOK is the final flush's outcome.
	finalFlushOK bool
}

// readState is the read pass's state (readback.go), on the service
// goroutine.
type readState struct {
	seqIDs    map[uint32]uint32 // producer<<16|writer → trusted_packet_sequence_id
	nextSeqID uint32
	pkt       buffer.Packet
}

// statsState is the session's counters and the packets the service
// writes itself: TraceStats, lifecycle events, clock snapshots, the trace
// uuid (servicepackets.go), on the service goroutine.
type statsState struct {
	counters   counters
	events     []serviceEvent // lifecycle events not yet written
	firstPass  bool           // the first read pass has been written
	traceUUID  [2]int64
	startClock []tracefile.Clock
	lastStats  time.Time
	scratch    []byte // service packets are built here
}

// outputStage hands read batches to the sinks' lanes (fanout.go): the
// service goroutine fills cur and sends it on out; the output goroutine
// writes it to every lane.
type outputStage struct {
	lanes        []*sinks.Lane // one per sink
	free         *batchPool
	out          chan *batch
	cur          *batch
	outDone      chan struct{}
	outCtx       context.Context // bounds a blocked lane's Offer once the session stops
	outCancel    context.CancelFunc
	outMu        sync.Mutex // guards outStat
	outStat      PassInfo
	sinkStop     chan struct{} // closed when a sink with on_error: stop failed
	sinkStopOnce sync.Once
	sinkErr      error
}

// flightRecorder is the session's flight recorder: clone snapshots
// (flightrec_snapshot.go, flightrec_transfer.go) and triggers
// (flightrec_triggers.go); what needs none of the loop is package
// flightrec.
type flightRecorder struct {
	snap snapState
	trig triggerState
}

// loopCalls are calls from other goroutines and the flushes they asked
// for (loopcall.go), and Perfetto consumers observing the session
// (observe.go).
type loopCalls struct {
	calls     chan func()
	flushWant []*flushRequest
	observers []*observer
}

// bufferState is one configured buffer and what the service tracks of it.
type bufferState struct {
	index  int
	name   string
	buf    *buffer.TraceBuffer
	unread int // chunk payload bytes copied since the last complete read of this buffer
	// seqSeen marks (producer, writer) keys already listed in provenance.
	seqSeen    map[uint32]bool
	provenance []tracefile.ProvenanceSequence
	// The last (producer, writer) key sequenceID resolved for this buffer
	// (+1, so that 0 is none) and its id: a chunk's packets come out one
	// after another, and a key once assigned and seen stays so.
	lastSeqKey uint64
	lastSeqID  uint32
	vms        *protovm.Instances // nil without ProtoVM programs
	vmGen      uint64             // vms.Generation() when its states were last written
	restore    *restore.Set       // nil without restore-path programs (package restore)
}

// New builds a session from a validated config: buffers, sinks and one
// producer (SMB, arbiter, data source instance) per data_sources entry.
// Nothing runs until Run.
func New(cfg *config.Config, opts Options) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Plugins == nil {
		opts.Plugins = testPluginHost
	}
	if opts.Plugins != nil {
		if err := opts.Plugins.ResolvePlugins(context.Background(), cfg); err != nil {
			return nil, err
		}
	}
	if err := config.CheckFixedMemory(cfg, opts.MaxMemory, "the session memory bound: run --max-memory"); err != nil {
		return nil, err
	}
	s := &Service{
		cfg: cfg, opts: opts,
		uid: int32(os.Getuid()), pid: int32(os.Getpid()),
		producerSet: producerSet{
			commits:  make(chan commitMsg, commitQueueLen),
			notes:    make(chan note, 4*len(cfg.DataSources)+1),
			restartC: make(chan *producer, 1),
			finished: make(chan struct{}),
		},
		readState: readState{
			seqIDs:    map[uint32]uint32{},
			nextSeqID: 2, // 1 is the service's own sequence
		},
		outputStage: outputStage{
			outDone:  make(chan struct{}),
			sinkStop: make(chan struct{}),
		},
		loopCalls: loopCalls{calls: make(chan func(), loopCallQueue)},
	}
	s.outCtx, s.outCancel = context.WithCancel(context.Background())
	s.snap.init()
	seed := opts.TriggerSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s.trig.init(cfg.TriggerConfig, seed)
	s.newUUID()
	for i, bc := range cfg.Buffers {
		policy := buffer.RingBuffer
		if bc.FillPolicy == "discard" {
			policy = buffer.Discard
		}
		b, err := buffer.New(int(bc.SizeKB)*1024, policy)
		if err != nil {
			s.closeBuffers()
			return nil, fmt.Errorf("buffers[%d]: %w", i, err)
		}
		s.buffers = append(s.buffers, &bufferState{index: i, name: bc.Name, buf: b, seqSeen: map[uint32]bool{}})
	}
	err := s.buildProducers()
	if err == nil {
		err = s.buildProtoVMs()
	}
	if err == nil {
		if opts.Sinks != nil {
			s.wrapSinks(opts.Sinks)
		} else {
			err = s.buildSinks()
		}
	}
	if err == nil {
		s.makeBatches()
		s.instances.Store(int64(len(s.producers)))
	}
	if err != nil {
		for _, p := range s.producers {
			_ = p.smb.Close() // memfd SMBs hold a descriptor each
		}
		s.closeBuffers()
		return nil, err
	}
	return s, nil
}

func (s *Service) buildProducers() error {
	for i := range s.cfg.DataSources {
		dc := &s.cfg.DataSources[i]
		if dc.Plugin == "" && s.opts.Perfetto != nil && s.opts.Perfetto.Serves(dc.Name) {
			// A config section must have a reader (checkPerfettoConfig);
			// a Perfetto producer took this name from a built-in.
			if len(dc.Config) > 0 {
				return fmt.Errorf("data_sources[%d].config: nothing reads it: %q is served by a Perfetto producer, which reads no config section; its DataSourceConfig goes in data_sources[%d].perfetto_config", i, dc.Name, i)
			}
			// One producer per connected Perfetto producer (remote.go).
			if err := s.addRemoteProducers(i); err != nil {
				return err
			}
			continue
		}
		if dc.PerfettoConfig != nil {
			return fmt.Errorf("data_sources[%d].perfetto_config: nothing reads it: no Perfetto producer registered %q, so the built-in data source of that name serves it, and it reads data_sources[%d].config", i, dc.Name, i)
		}
		if own := sourceConfigFields(dc.EncodedPerfettoConfig); len(own) > 0 && dc.Plugin == "" {
			// A Perfetto consumer's (or text config's) DataSourceConfig
			// meant for a producer: traced would have recorded nothing
			// without one, so the built-in stands in, and says what it
			// does not read.
			s.logf("data_sources[%d] %q: no Perfetto producer registered it; tracepipe's built-in serves it with its defaults and does not read the DataSourceConfig's %s (it reads data_sources[%d].config)", i, dc.Name, sourceConfigNames(own), i)
		}
		p, err := s.buildProducer(i, uint16(len(s.producers)+1))
		if err != nil {
			return err
		}
		s.producers = append(s.producers, p)
	}
	return nil
}

// buildProducer builds the producer of data_sources[i] with ProducerID id
// (a restarted plugin gets a new one: its sequences are new).
func (s *Service) buildProducer(i int, id uint16) (*producer, error) {
	pageSize := int(s.cfg.Producers.SMBPageSizeKB) * 1024
	smbSize := int(s.cfg.Producers.SMBSizeKB) * 1024
	client := buffer.ClientIdentity{UID: s.uid, PID: s.pid}
	dc := &s.cfg.DataSources[i]
	policy := smb.Drop
	if dc.BufferExhaustedPolicy == "stall" {
		policy = smb.Stall
	}
	spec := producerSpec{
		id: id, index: i, name: dc.Name, target: dc.TargetBuffer,
		source: dc.Name, policy: policy, abortOnStartError: dc.OnStartError == config.OnStartErrorAbort,
	}
	var p *producer
	var err error
	if dc.Plugin != "" {
		spec.source = dc.Plugin
		if s.opts.Plugins == nil {
			return nil, fmt.Errorf("data_sources[%d].plugin: %s: this program runs no plugin data sources (it was built without a plugin host; `tracepipe run` has one)", i, dc.Plugin)
		}
		p, err = newPluginProducer(s.opts.Plugins, spec, pluginSpec{path: dc.Plugin, config: dc.Config, limits: dc.Limits, smbSize: int(s.cfg.Producers.PluginSMBSizeKB) * 1024, pageSize: pageSize, logf: s.logf},
			client, s.commits, s.notes, s.finished)
		if err != nil {
			return nil, fmt.Errorf("data_sources[%d]: shared memory buffer: %w", i, err)
		}
	} else {
		factory, ok := plugins.Lookup(dc.Name)
		if !ok {
			return nil, fmt.Errorf("data_sources[%d].name: unknown data source %q", i, dc.Name)
		}
		ds, err := factory(dc.Config)
		if err != nil {
			return nil, fmt.Errorf("data_sources[%d].config: %w", i, err)
		}
		p, err = newInProcess(spec, ds, smbSize, pageSize, client, s.commits, s.notes, s.finished)
		if err != nil {
			return nil, fmt.Errorf("data_sources[%d]: shared memory buffer: %w", i, err)
		}
	}
	p.onChunk = func(v *smb.ChunkView) { s.copyChunk(p, v) }
	p.onTriggers = func(names []string) { s.ActivateTriggers(p.name, names...) } // flightrec_triggers.go
	p.onPatch = func(c *smb.ChunkToPatch) { s.patchChunk(p, c) }
	return p, nil
}

func (s *Service) logf(format string, args ...any) {
	sinks.Logf(s.opts.Logger, slog.LevelWarn, format, args...)
}

// logDetail is logf with the message's facts as fields for JSON logs
// (sinks.LogDetail).
func (s *Service) logDetail(detail []any, format string, args ...any) {
	sinks.LogDetail(s.opts.Logger, slog.LevelWarn, detail, format, args...)
}

// Result is what a finished session reports.
type Result struct {
	// Stats is the content of the final TraceStats packet.
	Stats tracefile.TraceStats
	// Packets and Bytes were handed to the sinks (per sink, before filters).
	Packets, Bytes uint64
	// Files written by file sinks.
	Files []string
	// Sinks reports, per sink, exactly what reached its destination.
	Sinks []SinkResult
	// StartErrors lists the data sources that failed to start (the
	// session went on without them unless one had on_start_error: abort,
	// whose error Run also returns), each as
	// "data_sources[i] (source): <why>".
	StartErrors []error
	// Snapshots counts the session's clone snapshots (flightrec_snapshot.go).
	Snapshots SnapshotStats
	// Triggers counts the triggers received; TriggerTimedOut: no trigger
	// acted within trigger_timeout or before the session ended
	// (start_tracing, stop_tracing), so it ended without data.
	Triggers        TriggerStats
	TriggerTimedOut bool
}

// DisableBeforeStart marks a session disabled before it started (a
// deferred_start Perfetto session disabled before StartTracing, which
// traced never starts): Run then starts none of its data sources, ends at
// once and releases what New built. Call it before Run.
func (s *Service) DisableBeforeStart() { s.neverStart = true }

// ErrAlreadyRun is returned by a second call to Run.
var ErrAlreadyRun = errors.New("pipeline: a Service runs once")

// Run runs the session until its duration elapses, ctx is cancelled or
// every data source ended on its own, then stops it gracefully. The data
// sources start at once, while the session already serves; one that fails
// to start is reported (and recorded in the trace's stats) and the session
// goes on without it, unless its on_start_error is abort. The returned
// error reports what prevented the session from running or finishing (a
// data source that failed to start, a sink that failed to close); losses
// are not errors: they are counted in Result.Stats.
func (s *Service) Run(ctx context.Context) (*Result, error) {
	if s.ran {
		return nil, ErrAlreadyRun
	}
	s.ran = true
	go s.output()
	s.begin()
	s.startTimers()
	defer s.timers.close()

	recCtx, cancel := context.WithCancel(ctx)
	if s.cfg.Duration > 0 {
		recCtx, cancel = context.WithTimeout(ctx, s.cfg.Duration)
	}
	defer cancel()
	s.stopRecording = recCtx.Done()
	defer s.trig.stop()
	if r := s.opts.Perfetto; r != nil && s.cfg.TriggerConfig != nil {
		defer r.WatchTriggers(s)() // Perfetto producers' ActivateTriggers
	}
	switch {
	case s.neverStart:
		cancel() // recording is over before it began
	case !s.triggerStart():
		s.startProducers()
	}
	s.serveUntil(func() bool { return s.recordingStopped || s.recordingOver() }, nil)
	s.phase = phaseEnding
	s.triggerEnded()
	s.snapEnd()
	res, err := s.finish()
	res.StartErrors = s.startErrs
	res.Snapshots = s.SnapshotStats()
	res.Triggers = s.TriggerStats()
	res.TriggerTimedOut = s.trig.timedOut
	return res, errors.Join(s.abort, err)
}

// buildProtoVMs gives every data source with a `protovm` section a VM in
// its target buffer's set (one VM per data source name and program, as
// Perfetto does) and feeds the set the packets the ring buffer overwrites.
func (s *Service) buildProtoVMs() error {
	for _, p := range s.producers {
		if err := s.addProtoVM(p); err != nil {
			return err
		}
	}
	for _, bs := range s.buffers {
		bs.observeOverwrites()
	}
	return nil
}

// addProtoVM gives producer p the ProtoVM program of its data source, if
// it has one, in its target buffer's set (the caller then installs the
// buffer's overwrite observer).
func (s *Service) addProtoVM(p *producer) error {
	pc := s.cfg.DataSources[p.index].ProtoVM
	if pc == nil {
		return nil
	}
	bs := s.buffers[p.target]
	if bs.buf.Policy() != buffer.RingBuffer {
		s.logf("data_sources[%d].protovm: buffer %d discards when full and never overwrites; the program will see no packets", p.index, p.target)
	}
	if pc.Path != config.ProtoVMPathPerfetto {
		if bs.restore == nil {
			bs.restore = restore.NewSet()
		}
		bs.restore.AddProgram(p.id, restore.NewProgram(pc.ProgramBytes, int(pc.MemoryLimitKB)*1024))
		return nil
	}
	if bs.vms == nil {
		bs.vms = &protovm.Instances{}
	}
	if _, err := bs.vms.Add(p.name, pc.ProgramBytes, pc.MemoryLimitKB, int32(p.id)); err != nil {
		return fmt.Errorf("data_sources[%d].protovm.program: %w", p.index, err)
	}
	return nil
}

// observeOverwrites installs the buffer's overwrite observer: packets of
// producers with a restore program go to their sequence's fold, the others
// to the buffer's perfetto-path VMs (protovm.Instances), if any.
func (bs *bufferState) observeOverwrites() {
	vms, rs := bs.vms, bs.restore
	switch {
	case rs == nil && vms == nil:
	case rs == nil:
		bs.buf.SetOverwriteObserver(func(seq buffer.SequenceProperties, packet [][]byte) {
			vms.Observe(int32(seq.ProducerID), packet)
		})
	default:
		bs.buf.SetOverwriteObserver(func(seq buffer.SequenceProperties, packet [][]byte) {
			switch {
			case rs.Serves(seq.ProducerID):
				rs.Observe(seq, packet)
			case vms != nil:
				vms.Observe(int32(seq.ProducerID), packet)
			default:
				rs.CountUnrouted()
			}
		})
	}
}

// finish ends the session (reference/service.md §3 FlushAndDisableTracing
// then DisableTracing): final flush, stop the data sources, scrape the
// SMBs, final read pass with the TraceStats packet, close the sinks.
func (s *Service) finish() (*Result, error) {
	if s.finalFlush() {
		s.counters.finalFlush = tracefile.FlushOutcomeSucceeded
	} else {
		s.counters.finalFlush = tracefile.FlushOutcomeFailed
	}
	s.stopProducers()
	s.drain()
	close(s.finished) // late commits are now counted instead of sent
	s.drain()
	s.scrape()
	s.event(tracefile.EventTracingDisabled)
	// A lane that blocks (when_full: block) holds the output goroutine at
	// most this long from now on; then what it cannot take is counted.
	stuck := time.AfterFunc(sinkCloseTime, s.outCancel)
	defer stuck.Stop()
	s.readPass(true, false)
	final := s.traceStats()
	close(s.out)
	<-s.outDone
	ctx, cancel := context.WithTimeout(context.Background(), sinkCloseTime)
	defer cancel()
	var errs []error
	if s.sinkErr != nil {
		errs = append(errs, s.sinkErr)
	}
	errs = append(errs, s.closeLanes(ctx)...)
	s.outCancel()
	s.free.close() // the batches' mapping goes once no lane holds one
	final.Tracepipe = withSinkTotals(final.Tracepipe, s.sinkTotals())
	final.Tracepipe.PeerSinks = s.peerStats()
	for _, p := range s.producers {
		p.side.Close()
		_ = p.smb.Close()
	}
	s.closeBuffers() // everything was read; the sinks hold copies
	s.timers.close()
	out := s.outputTotals()
	s.publishStatus()
	return &Result{Stats: final, Packets: out.Packets, Bytes: out.Bytes, Files: s.Files(), Sinks: s.sinkResults()}, errors.Join(errs...)
}

// closeBuffers gives the buffers' memory back to the OS (they are mapped
// outside the Go heap); their sizes and stats still answer afterwards.
func (s *Service) closeBuffers() {
	for _, bs := range s.buffers {
		bs.buf.Close()
	}
}
