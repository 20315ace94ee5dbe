package perfettosvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/transport/perfetto"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/sinks"
	"github.com/tracepipe/tracepipe/tracefile"
)

// PerfettoConsumers runs the sessions Perfetto consumers (the perfetto
// command) enable on tracepipe's consumer socket: the
// perfettoipc.ConsumerBackend. Each session is an ordinary pipeline.Service whose
// config comes from the consumer's TraceConfig, with the connected
// Perfetto producers (and tracepipe's built-in data sources) as its
// producers; its one sink is the consumer: the file descriptor it passed
// (write_into_file) or a bounded in-memory queue that ReadBuffers drains.
type PerfettoConsumers struct {
	Producers *perfetto.Producers
	Logger    *slog.Logger // warnings; nil discards them

	// MaxMemory bounds what the running consumer sessions together may
	// hold: their buffers, their data sources' SMBs and, for a session
	// read with ReadBuffers, its bounded read queue. EnableTracing refuses
	// a session that would go over it, naming the figures: any local user
	// may connect to the consumer socket. 0: half of the machine's RAM;
	// negative: no bound.
	MaxMemory int64

	// SetHeapLimit, if set, is told the soft memory limit for the Go
	// runtime whenever the sessions' share of the heap changes (heap.go):
	// `serve --perfetto` passes it to debug.SetMemoryLimit unless the
	// user set GOMEMLIMIT.
	SetHeapLimit func(limit int64)

	heapMu    sync.Mutex // orders SetHeapLimit calls
	heapInUse int64      // charged by sessions and unread queues (heap.go)

	mu       sync.Mutex
	memInUse int64 // reserved by running sessions (MaxMemory)
	active   int
	started  int
	lastID   uint64
	sessions map[uint64]*consumerSession // running, by tracing session id
}

// EnableTracing implements perfettoipc.ConsumerBackend.
func (pc *PerfettoConsumers) EnableTracing(peer perfettoipc.Peer, tc []byte, outFD int) (perfettoipc.ConsumerSession, error) {
	closeFD := func() {
		if outFD >= 0 {
			unix.Close(outFD)
		}
	}
	cfg, err := config.ConfigFromTraceConfig(tc)
	if err != nil {
		closeFD()
		return nil, err
	}
	// As traced, a data source no producer serves yet is not an error:
	// the session runs, and a producer that registers it later (and that
	// its producer filters admit) joins the session (pipeline's joinLate).
	for _, dc := range cfg.DataSources {
		if _, builtin := plugins.Lookup(dc.Name); !builtin && !pc.Producers.HasProducerFor(&dc) {
			sinks.Logf(pc.Logger, slog.LevelInfo, "perfetto consumer (pid %d): no producer serves data source %q yet; it starts for this session when one registers it", peer.PID, dc.Name)
		}
	}
	for _, w := range cfg.TraceConfigWarnings() {
		// EnableTracing's reply has no place for a warning (error fails
		// the session), so the service's log carries it, as traced's does.
		sinks.Logf(pc.Logger, slog.LevelWarn, "perfetto consumer (pid %d): trace_config.%s", peer.PID, w)
	}
	cs := &consumerSession{done: make(chan struct{})}
	// As traced, a CLONE_SNAPSHOT session's buffers are read only by
	// CloneSession: its own ReadBuffers returns nothing, and with
	// write_into_file it is refused (tracing_service_impl.cc).
	cloneOnly := cfg.TriggerConfig != nil && cfg.TriggerConfig.Mode == config.TriggerModeClone
	var sink sinks.Sink
	switch {
	case cloneOnly && cfg.WriteIntoFile:
		closeFD()
		return nil, errors.New("trace_config: trigger_config.trigger_mode CLONE_SNAPSHOT with write_into_file is not supported, as in traced: the session is read by cloning it")
	case cloneOnly:
		closeFD()
		sink = cloneOnlySink{}
	case cfg.WriteIntoFile && outFD >= 0:
		cs.file = true
		sink = newFDSink(os.NewFile(uintptr(outFD), "perfetto consumer output"))
	case cfg.WriteIntoFile:
		return nil, errors.New("trace_config.write_into_file: pass the output file descriptor with EnableTracing (output_path is not supported)")
	default:
		closeFD()
		limit := 0
		for _, b := range cfg.Buffers {
			limit += int(b.SizeKB) * 1024
		}
		// Room for a full read of every buffer as traced's ReadBuffers
		// returns it: the packets grow by the trusted fields stamped on
		// each (half again for small packets), and the service's own
		// packets come on top. Bounded all the same; what does not fit
		// is counted.
		cs.mem = &memSink{limit: 2*limit + 1<<20}
		sink = cs.mem
	}
	if err := pc.reserve(cs, cfg); err != nil {
		_ = sink.Close(context.Background())
		return nil, err
	}
	cs.clones = map[int]*memSink{}
	cs.cloneLimit = 0
	for _, b := range cfg.Buffers {
		cs.cloneLimit += int(b.SizeKB) * 1024
	}
	// One tracing session id, as traced's: what QueryServiceState and
	// CloneSession name, what clone_trigger_hit says and what the
	// producers are told (tracing_session_id).
	if pc.Producers != nil {
		cs.id = pc.Producers.NewSessionID()
	} else {
		pc.mu.Lock()
		pc.lastID++
		cs.id = pc.lastID
		pc.mu.Unlock()
	}
	var remote pipeline.RemoteProducers // nil unless there are producers (no typed nil)
	if pc.Producers != nil {
		remote = pc.Producers
	}
	svc, err := pipeline.New(cfg, pipeline.Options{Sinks: []sinks.Sink{sink}, Perfetto: remote, Logger: pc.Logger, SnapshotSink: cs.cloneSink,
		OnCloneTrigger: cs.cloneTriggerHit, TracingSessionID: cs.id})
	if err != nil {
		pc.release(cs)
		_ = sink.Close(context.Background())
		return nil, err
	}
	cs.svc = svc
	cs.pc = pc
	cs.heap = pc.newCharge(svc.HeapBudget())
	if cs.mem != nil {
		cs.mem.charge(pc)
	}
	cs.hasTriggers = cfg.TriggerConfig != nil && len(cfg.TriggerConfig.Triggers) > 0
	cs.uid = peer.UID
	cs.uniqueName = string(lastField(tc, 22).Bytes)
	cs.traceConfig = append([]byte(nil), tc...)
	for _, b := range cfg.Buffers {
		cs.bufferKB = append(cs.bufferKB, b.SizeKB)
	}
	cs.durationMs = uint32(min(cfg.Duration.Milliseconds(), 1<<31))
	ctx, cancel := context.WithCancel(context.Background())
	cs.cancel = cancel
	pc.mu.Lock()
	pc.active++
	pc.started++
	if pc.sessions == nil {
		pc.sessions = map[uint64]*consumerSession{}
	}
	pc.sessions[cs.id] = cs
	pc.mu.Unlock()
	cs.run = func() {
		go func() {
			defer close(cs.done)
			defer cancel()
			res, err := svc.Run(ctx)
			svc.ObserveEnd()
			cs.mu.Lock()
			cs.res, cs.err = res, err
			cs.mu.Unlock()
			pc.ended(cs)
		}()
	}
	if lastField(tc, 12).Varint != 0 { // deferred_start: StartTracing runs it
		return cs, nil
	}
	cs.mu.Lock()
	cs.started = true
	cs.mu.Unlock()
	cs.run()
	return cs, nil
}

// RunningSession is a consumer session being recorded, for displays
// (serve --perfetto's /metrics).
type RunningSession struct {
	ID      uint64 // tracing session id
	Service *pipeline.Service
}

// Running lists the sessions running now, by tracing session id.
func (pc *PerfettoConsumers) Running() []RunningSession {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	out := make([]RunningSession, 0, len(pc.sessions))
	for id, cs := range pc.sessions {
		out = append(out, RunningSession{ID: id, Service: cs.svc})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// ended forgets a session whose Run returned (or that never ran). Its
// read queue and clones stay charged to the heap until read.
func (pc *PerfettoConsumers) ended(cs *consumerSession) {
	pc.release(cs)
	cs.heap.settle()
	if cs.mem != nil {
		cs.mem.end()
	}
	cs.cloneMu.Lock()
	for n, m := range cs.clones { // snapshots nobody took (CloneSession timed out)
		delete(cs.clones, n)
		m.end()
	}
	cs.cloneMu.Unlock()
	pc.mu.Lock()
	pc.active--
	delete(pc.sessions, cs.id)
	pc.mu.Unlock()
}

// reserve takes what session cs can come to hold out of MaxMemory, or
// says why it cannot.
func (pc *PerfettoConsumers) reserve(cs *consumerSession, cfg *config.Config) error {
	buffers, smbs := cfg.FixedMemory()
	cost := buffers + smbs
	if cs.mem != nil {
		cost += int64(cs.mem.limit)
	}
	limit, what := pc.MaxMemory, "serve --max-consumer-memory"
	if limit == 0 {
		limit, what = config.PhysicalMemory()/2, "half of this machine's RAM; serve --max-consumer-memory"
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if limit > 0 && pc.memInUse+cost > limit {
		return fmt.Errorf("trace_config.buffers: the session could hold %s (buffers %s, shared memory buffers %s, read queue %s) and running sessions hold %s, more than the consumer sessions' bound of %s (%s)",
			mib(cost), mib(buffers), mib(smbs), mib(cost-buffers-smbs), mib(pc.memInUse), mib(limit), what)
	}
	pc.memInUse += cost
	cs.memCost = cost
	return nil
}

// release gives back what reserve took for cs (once).
func (pc *PerfettoConsumers) release(cs *consumerSession) {
	pc.mu.Lock()
	pc.memInUse -= cs.memCost
	cs.memCost = 0
	pc.mu.Unlock()
}

// QueryServiceState implements perfettoipc.ConsumerBackend: the connected
// producers and their data sources, by name as traced lists them, and the
// sessions peer may clone (its own uid's; every one for root), as traced
// lists them. num_sessions and num_sessions_started count every session,
// as traced's do.
func (pc *PerfettoConsumers) QueryServiceState(peer perfettoipc.Peer, sessionsOnly bool) *perfettoipc.TracingServiceState {
	pc.mu.Lock()
	active, started := pc.active, pc.started
	pc.mu.Unlock()
	st := &perfettoipc.TracingServiceState{
		NumSessions:             proto.Int32(int32(active)),
		NumSessionsStarted:      proto.Int32(int32(started)),
		TracingServiceVersion:   proto.String("tracepipe (Perfetto IPC)"),
		SupportsTracingSessions: proto.Bool(true),
	}
	pc.mu.Lock()
	ids := make([]uint64, 0, len(pc.sessions))
	for id := range pc.sessions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if cs := pc.sessions[id]; cs.mayClone(peer) {
			st.TracingSessions = append(st.TracingSessions, cs.serviceState())
		}
	}
	pc.mu.Unlock()
	if sessionsOnly || pc.Producers == nil {
		return st
	}
	pc.Producers.AppendServiceState(st)
	return st
}

// consumerSession is one consumer's session (perfettoipc.ConsumerSession).
type consumerSession struct {
	svc *pipeline.Service
	pc  *PerfettoConsumers
	// memCost is what the session reserved of pc.MaxMemory (pc.mu).
	memCost int64
	heap    *heapCharge // its pipeline's heap budget, until it ended
	cancel  context.CancelFunc
	done    chan struct{}
	file    bool
	mem     *memSink
	run     func() // starts Run (once)

	id          uint64 // tracing session id, as CloneSession names it
	bufferKB    []uint32
	durationMs  uint32
	uid         uint32 // the consumer's, from its socket
	uniqueName  string // TraceConfig.unique_session_name
	traceConfig []byte // as the consumer sent it (ChangeTraceConfig compares)

	hasTriggers bool // trigger_config with triggers (awaitingTrigger)

	cloneLimit int
	hitMu      sync.Mutex
	hitN       int
	hitObs     map[int]func(*perfettoipc.ObservableEvents) // TYPE_CLONE_TRIGGER_HIT observers
	cloneMu    sync.Mutex
	clones     map[int]*memSink // snapshots being written for CloneSession, by number

	mu      sync.Mutex
	started bool
	res     *pipeline.Result
	err     error
}

// mayClone says whether peer may clone the session, and so see it in
// QueryServiceState: the session's own uid, or root (traced's
// IsCloneAllowed without Android's bugreport and statsd cases).
func (cs *consumerSession) mayClone(peer perfettoipc.Peer) bool {
	return peer.UID == 0 || peer.UID == cs.uid
}

// serviceState is the session as QueryServiceState lists it (traced's
// TracingServiceState.TracingSession).
func (cs *consumerSession) serviceState() *perfettoipc.TracingServiceState_TracingSession {
	started := cs.isStarted()
	state := "CONFIGURED"
	if started {
		state = "STARTED"
	}
	return &perfettoipc.TracingServiceState_TracingSession{
		Id: proto.Uint64(cs.id), ConsumerUid: proto.Int32(int32(cs.uid)), State: proto.String(state),
		UniqueSessionName: proto.String(cs.uniqueName), BufferSizeKb: cs.bufferKB,
		DurationMs: proto.Uint32(cs.durationMs), NumDataSources: proto.Uint32(uint32(cs.svc.DataSourceInstances())),
		IsStarted: proto.Bool(started),
	}
}

func (cs *consumerSession) Done() <-chan struct{} { return cs.done }
func (cs *consumerSession) Err() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.err
}

// Disable ends the session. One never started (deferred_start) runs
// disabled before start, so that the service releases what pipeline.New built
// (SMB mappings, sinks) without starting any data source, as traced never
// starts them.
func (cs *consumerSession) Disable() {
	cs.mu.Lock()
	never := !cs.started
	cs.started = true // StartTracing after this fails
	cs.mu.Unlock()
	cs.cancel()
	if never {
		cs.svc.DisableBeforeStart()
		cs.run()
	}
}

var errNotStarted = errors.New("the session waits for StartTracing (deferred_start)")

// Start runs a session enabled with deferred_start.
func (cs *consumerSession) Start() error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.started {
		return errors.New("the session is already started")
	}
	cs.started = true
	cs.run()
	return nil
}

func (cs *consumerSession) isStarted() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.started
}

// Observe sends the session's data source instance changes and
// all_data_sources_started as Perfetto's ObservableEvents.
func (cs *consumerSession) Observe(mask uint32, emit func(*perfettoipc.ObservableEvents)) (func(), error) {
	if !cs.isStarted() {
		return nil, errNotStarted
	}
	wantInstances := mask&uint32(perfettoipc.ObservableEvents_TYPE_DATA_SOURCES_INSTANCES) != 0
	wantStarted := mask&uint32(perfettoipc.ObservableEvents_TYPE_ALL_DATA_SOURCES_STARTED) != 0
	unhit := func() {}
	if mask&uint32(perfettoipc.ObservableEvents_TYPE_CLONE_TRIGGER_HIT) != 0 {
		unhit = cs.watchCloneHits(emit)
	}
	cancel, err := cs.svc.Observe(context.Background(), func(o pipeline.Observation) {
		ev := &perfettoipc.ObservableEvents{}
		if wantInstances {
			for _, c := range o.Changes {
				st := perfettoipc.ObservableEvents_DATA_SOURCE_INSTANCE_STATE_STOPPED
				if c.Started {
					st = perfettoipc.ObservableEvents_DATA_SOURCE_INSTANCE_STATE_STARTED
				}
				ev.InstanceStateChanges = append(ev.InstanceStateChanges, &perfettoipc.ObservableEvents_DataSourceInstanceStateChange{
					ProducerName: proto.String(c.Producer), DataSourceName: proto.String(c.DataSource), State: st.Enum()})
			}
		}
		if wantStarted && o.AllStarted {
			ev.AllDataSourcesStarted = proto.Bool(true)
		}
		if len(ev.InstanceStateChanges) > 0 || ev.AllDataSourcesStarted != nil {
			emit(ev)
		}
	})
	if err != nil {
		unhit()
		return nil, err
	}
	return func() { unhit(); cancel() }, nil
}

// watchCloneHits sends emit a TYPE_CLONE_TRIGGER_HIT event for each
// clone_snapshot trigger that acts, until the returned function is
// called.
func (cs *consumerSession) watchCloneHits(emit func(*perfettoipc.ObservableEvents)) (unwatch func()) {
	cs.hitMu.Lock()
	defer cs.hitMu.Unlock()
	if cs.hitObs == nil {
		cs.hitObs = map[int]func(*perfettoipc.ObservableEvents){}
	}
	cs.hitN++
	n := cs.hitN
	cs.hitObs[n] = emit
	return func() {
		cs.hitMu.Lock()
		delete(cs.hitObs, n)
		cs.hitMu.Unlock()
	}
}

// cloneTriggerHit is the session's pipeline.Options.OnCloneTrigger: as traced, the
// consumers observing TYPE_CLONE_TRIGGER_HIT are told the session and
// trigger, and clone the session themselves (CloneSession). Nobody
// observing: the trigger is in the trace, nothing is cloned.
func (cs *consumerSession) cloneTriggerHit(h pipeline.CloneTriggerHit) {
	// Every field traced sets: perfetto_cmd passes them back in its
	// CloneSession, and the clone's trigger packet names the producer.
	hit := &perfettoipc.ObservableEvents_CloneTriggerHit{
		TracingSessionId: proto.Int64(int64(cs.id)), TriggerName: proto.String(h.Trigger),
		ProducerName: proto.String(h.Producer), BootTimeNs: proto.Uint64(h.BootTimeNs),
		TriggerDelayMs: proto.Uint64(uint64(h.Delay.Milliseconds()))}
	if h.ProducerUID >= 0 {
		hit.ProducerUid = proto.Uint32(uint32(h.ProducerUID))
	}
	ev := &perfettoipc.ObservableEvents{CloneTriggerHit: hit}
	cs.hitMu.Lock()
	defer cs.hitMu.Unlock()
	for _, emit := range cs.hitObs {
		emit(ev) // never blocks (the port queues)
	}
}

// Flush flushes the running session's data sources (pipeline.Service.Flush):
// nil once every one acknowledged within timeout (0: the session's
// flush_timeout_ms), as traced answers a consumer's Flush.
func (cs *consumerSession) Flush(timeout time.Duration, flags uint64) error {
	if !cs.isStarted() {
		return errNotStarted
	}
	// The consumer's flags reach the producers, as traced passes them on.
	return cs.svc.FlushWithFlags(context.Background(), timeout, plugins.FlushFlags(flags))
}

func (cs *consumerSession) ReadPackets(maxBytes int) [][]byte {
	if cs.mem == nil {
		return nil
	}
	if cs.awaitingTrigger() {
		cs.mem.take(-1)
		return nil
	}
	return cs.mem.take(maxBytes)
}

// awaitingTrigger says whether the session has triggers and none acted:
// as traced, such a session is empty to ReadBuffers, its own packets
// (clock snapshots, trace config, stats) included.
func (cs *consumerSession) awaitingTrigger() bool {
	return cs.hasTriggers && cs.svc.TriggerStats().Acted == 0
}

func (cs *consumerSession) Free() {
	if cs.mem != nil {
		cs.mem.take(-1)
	}
}

func (cs *consumerSession) WritesIntoFile() bool { return cs.file }

// TraceStats is the session's TraceStats as of now while it runs, the
// final one once it ended.
func (cs *consumerSession) TraceStats() ([]byte, error) {
	final := func() *pipeline.Result {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return cs.res
	}
	if res := final(); res != nil {
		return tracefile.AppendTraceStatsMessage(nil, &res.Stats), nil
	}
	if !cs.isStarted() {
		return nil, errNotStarted
	}
	ts, err := cs.svc.TraceStats(context.Background())
	if errors.Is(err, pipeline.ErrSessionOver) {
		// It ended meanwhile: its final stats are a moment away.
		t := time.NewTimer(finalStatsWait)
		defer t.Stop()
		select {
		case <-cs.done:
			if res := final(); res != nil {
				return tracefile.AppendTraceStatsMessage(nil, &res.Stats), nil
			}
		case <-t.C:
		}
	}
	if err != nil {
		return nil, err
	}
	return tracefile.AppendTraceStatsMessage(nil, &ts), nil
}

// memSink keeps the packets a session read until the consumer's
// ReadBuffers takes them, bounded in proportion to the session's buffer
// sizes (as traced's buffers bound what ReadBuffers can return): packets
// beyond the bound are dropped and counted, except the final TraceStats
// (WriteLast).
type memSink struct {
	mu      sync.Mutex
	limit   int
	held    int
	packets [][]byte
	stats   sinks.SinkStats
	heap    *heapCharge // its limit, charged to the heap until read out (heap.go)
	ended   bool        // nothing more is written
}

func (m *memSink) Write(_ context.Context, packets [][]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range packets {
		if m.held+len(p) > m.limit {
			m.stats.PacketsDroppedQueue++
			m.stats.BytesDroppedQueue += uint64(len(p))
			continue
		}
		m.packets = append(m.packets, append([]byte(nil), p...))
		m.held += len(p)
		m.stats.PacketsWritten++
		m.stats.BytesWritten += uint64(len(p))
	}
	return nil
}

// take removes about maxBytes of packets (at least one if any; all when
// maxBytes < 0).
func (m *memSink) take(maxBytes int) [][]byte {
	m.mu.Lock()
	n, size := 0, 0
	for n < len(m.packets) && (maxBytes < 0 || n == 0 || size+len(m.packets[n]) <= maxBytes) {
		size += len(m.packets[n])
		n++
	}
	out := m.packets[:n:n]
	m.packets = m.packets[n:]
	m.held -= size
	h := m.settleIfReadLocked()
	m.mu.Unlock()
	h.settle()
	return out
}

// WriteLast implements sinks.LastWriter: the session's final TraceStats
// is kept past the bound. A full ring buffer is already about the bound,
// and the service's own packets come on top; without this the packet
// that counts every loss (overwrites, the drops above) was the one
// dropped, and a ReadBuffers trace ended without TraceStats, as traced's
// never do.
func (m *memSink) WriteLast(packet []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.packets = append(m.packets, append([]byte(nil), packet...))
	m.held += len(packet)
	m.stats.PacketsWritten++
	m.stats.BytesWritten += uint64(len(packet))
	return nil
}

func (m *memSink) Flush(context.Context) error { return nil }
func (m *memSink) Close(context.Context) error { return nil }
func (m *memSink) Stats() sinks.SinkStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stats
}

// cloneOnlySink is a CLONE_SNAPSHOT session's own sink: what its
// readback passes is not for the consumer (ReadBuffers returns nothing,
// as traced's does); its clones read the buffers.
type cloneOnlySink struct{}

func (cloneOnlySink) Write(context.Context, [][]byte) error { return nil }
func (cloneOnlySink) Flush(context.Context) error           { return nil }
func (cloneOnlySink) Close(context.Context) error           { return nil }
func (cloneOnlySink) Stats() sinks.SinkStats                { return sinks.SinkStats{} }

// finalStatsWait bounds TraceStats' wait for the final stats of a session
// that ended while it asked: as long as the session may take to close its
// sinks (pipeline's bound).
const finalStatsWait = 30 * time.Second

// lastField is the last field num of TraceConfig b, of any wire type (as
// protobuf, the last occurrence wins; none: the zero Field). b was
// already read whole by ConfigFromTraceConfig.
func lastField(b []byte, num protowire.Number) (f wire.Field) {
	_ = wire.Walk(b, func(g wire.Field) error {
		if g.Num == num {
			f = g
		}
		return nil
	})
	return f
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
