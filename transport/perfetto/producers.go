package perfetto

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/pipeline"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// Producers is the set of Perfetto producers (SDK apps,
// traced_probes) connected to tracepipe's producer socket: the
// perfettoipc.Backend of a perfettoipc ProducerPort. Producers connect
// and register data sources whenever they like; a session (Options.Perfetto)
// binds, for each data_sources[i] that is neither built in nor a plugin,
// every connected producer that registered that name.
//
// As traced, a producer connection is shared: every data_sources[i] of
// every session that a producer serves is its own data source instance
// (new_instance_id) on the producer's one connection and SMB. Each
// instance is one producer of its session's service (the session core
// owns its buffers, readers and loss accounting); the connection routes
// each commit's chunks by their target buffer — a global buffer id, unique
// across sessions as traced's — to the instance of the session that owns
// that buffer. Chunks for a buffer no instance of this producer writes
// (another session's, or one that ended) are counted (ChunksUnrouted),
// freed in the SMB and dropped: a producer can never write into a buffer
// it was not given. Flushes of one session are one flush command listing
// every instance of that session on the producer, acknowledged once.
type Producers struct {
	mu      sync.Mutex
	conns   []*perfettoConn
	changed chan struct{} // closed and replaced on every change
	lastID  int32         // producer ids handed out (traced's producers_seen)
	// Commits that arrived on a connection no session uses (dropped).
	CommitsUnbound atomic.Uint64
	// ChunksUnrouted counts chunks (and patch groups) aimed at a buffer
	// that no instance of their producer writes: freed and dropped.
	ChunksUnrouted atomic.Uint64

	// triggerTargets are the running sessions with a trigger_config:
	// what producers' ActivateTriggers reach.
	triggerTargets map[*pipeline.Service]struct{}

	nextInstance atomic.Uint64 // data source instance ids (traced's data_sources_seen)
	nextSession  atomic.Uint64 // tracing_session_id
	nextBuffer   atomic.Uint32 // global buffer ids
	nextFlush    atomic.Uint64 // flush request ids, unique across sessions
}

// NewProducers returns an empty set.
func NewProducers() *Producers {
	return &Producers{changed: make(chan struct{})}
}

// perfettoConn is one producer connection, shared by every instance it
// serves, in any number of sessions.
type perfettoConn struct {
	r    *Producers
	id   int32 // producer id in QueryServiceState (connection order)
	pp   *perfettoipc.Producer
	gone chan struct{} // closed when the connection ended

	mu sync.Mutex
	// routes: global buffer id → the instances writing it, in start
	// order; the first receives the buffer's chunks (instances of one
	// session may share a buffer; sessions never do).
	routes    map[uint32][]*perfettoSide
	instances map[uint64]*perfettoSide // set up and not closed, by instance id
	flushes   []*connFlush             // flush commands not acknowledged yet

	// Connection goroutine only.
	cd     smb.CommitData
	split  []routedCommit
	orphan *smb.Reader // frees the chunks nobody receives
}

// routedCommit is the part of a commit for one instance.
type routedCommit struct {
	to *perfettoSide
	cd smb.CommitData
}

// connFlush is one flush command: every live instance of one session on
// the connection, for the service's flush svcID.
type connFlush struct {
	sess  *perfettoSession
	svcID uint64
	req   uint64        // the request id the producer acknowledges
	done  chan struct{} // closed on the acknowledgement
	ids   []uint64      // the instances the command lists
	// Guarded by conn.mu: instances of ids not joined yet, and whether
	// the acknowledgement came. An acknowledged flush is kept until every
	// instance joined, so that a late one does not send it again.
	left  int
	acked bool
}

// maxConnFlushes bounds the flush commands a connection waits on (one
// per session at a time; more only when producers leave flushes
// unanswered, and their waiters time out).
const maxConnFlushes = 64

// perfettoSession is what the Perfetto producers know of one service:
// its tracing_session_id and the global ids of its buffers.
type perfettoSession struct {
	r       *Producers
	id      uint64
	buffers []uint32 // by buffer index
}

// NewSession implements pipeline.RemoteProducers: the session's
// tracing_session_id (id, or a new one) and a global id per buffer.
func (r *Producers) NewSession(id uint64, buffers int) pipeline.RemoteSession {
	ps := &perfettoSession{r: r, id: id}
	if ps.id == 0 {
		ps.id = r.nextSession.Add(1)
	}
	for range buffers {
		ps.buffers = append(ps.buffers, r.nextBuffer.Add(1))
	}
	return ps
}

func (r *Producers) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *Producers) find(pp *perfettoipc.Producer) *perfettoConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.conns {
		if c.pp == pp {
			return c
		}
	}
	return nil
}

// Connected implements perfettoipc.Backend.
func (r *Producers) Connected(pp *perfettoipc.Producer) {
	r.mu.Lock()
	r.lastID++
	r.conns = append(r.conns, &perfettoConn{r: r, id: r.lastID, pp: pp, gone: make(chan struct{}),
		routes: map[uint32][]*perfettoSide{}, instances: map[uint64]*perfettoSide{}, orphan: smb.NewReader(pp.SMB())})
	r.notify()
	r.mu.Unlock()
}

// Disconnected implements perfettoipc.Backend: every session the producer
// served sees its instances die, as a plugin process that exited.
func (r *Producers) Disconnected(pp *perfettoipc.Producer) {
	r.mu.Lock()
	for i, c := range r.conns {
		if c.pp == pp {
			r.conns = append(r.conns[:i], r.conns[i+1:]...)
			close(c.gone)
			break
		}
	}
	r.notify()
	r.mu.Unlock()
}

// DataSourceRegistered implements perfettoipc.Backend.
func (r *Producers) DataSourceRegistered(*perfettoipc.Producer, *perfettoipc.DataSourceDescriptor) {
	r.mu.Lock()
	r.notify()
	r.mu.Unlock()
}

// DataSourceUnregistered implements perfettoipc.Backend.
func (r *Producers) DataSourceUnregistered(*perfettoipc.Producer, string) {
	r.mu.Lock()
	r.notify()
	r.mu.Unlock()
}

// Changed implements pipeline.RemoteProducers: closed at the next
// connection, disconnection, registration or unregistration.
func (r *Producers) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Commit implements perfettoipc.Backend (connection goroutine): the
// commit's chunks and patches go, by target buffer, to the instances
// that own those buffers, through their services' commit queues exactly
// as a plugin's commit does (deliver blocks while a queue is full:
// backpressure on this one producer's connection). A flush
// acknowledgement then wakes the instances waiting on it; each hands its
// own service the acknowledgement, after the data.
//
// decoded is the port's decoding of data (nil: Commit decodes it).
func (r *Producers) Commit(pp *perfettoipc.Producer, data []byte, decoded *smb.CommitData) {
	c := r.find(pp)
	if c == nil {
		return
	}
	cd := decoded
	if cd == nil {
		if c.cd.Unmarshal(data) != nil {
			return // the port let only valid commits through
		}
		cd = &c.cd
	}
	c.mu.Lock()
	if len(c.instances) == 0 {
		c.mu.Unlock()
		r.CommitsUnbound.Add(1)
		c.orphan.ReadCommit(cd, nil, nil) // free the chunks
		if id := cd.FlushRequestID; id != 0 {
			c.acked(id)
		}
		return
	}
	if to := c.soleRouteLocked(cd); to != nil {
		// The common case: every chunk and patch is for one instance and
		// no flush is acknowledged. The service receives the producer's
		// own encoding (it decodes and validates it again, as any
		// producer's commit), without a re-encoding here.
		c.mu.Unlock()
		l := to.link
		l.Deliver(append(l.CommitBuffer(), data...))
		return
	}
	// 1. Sort the moves and patches by the instance owning their buffer.
	c.split = c.split[:0]
	part := func(buf uint32) *smb.CommitData {
		to := c.routeLocked(buf)
		if to == nil {
			return nil
		}
		for i := range c.split {
			if c.split[i].to == to {
				return &c.split[i].cd
			}
		}
		if n := len(c.split); n < cap(c.split) {
			c.split = c.split[:n+1] // keeps the part's slices for reuse
		} else {
			c.split = append(c.split, routedCommit{})
		}
		rc := &c.split[len(c.split)-1]
		rc.to = to
		rc.cd.ChunksToMove, rc.cd.ChunksToPatch, rc.cd.FlushRequestID = rc.cd.ChunksToMove[:0], rc.cd.ChunksToPatch[:0], 0
		return &rc.cd
	}
	var unrouted smb.CommitData
	for _, m := range cd.ChunksToMove {
		if d := part(m.TargetBuffer); d != nil {
			d.ChunksToMove = append(d.ChunksToMove, m)
		} else {
			unrouted.ChunksToMove = append(unrouted.ChunksToMove, m)
		}
	}
	for _, pt := range cd.ChunksToPatch {
		if d := part(pt.TargetBuffer); d != nil {
			d.ChunksToPatch = append(d.ChunksToPatch, pt)
		} else {
			r.ChunksUnrouted.Add(1)
		}
	}
	c.mu.Unlock()
	if n := len(unrouted.ChunksToMove); n > 0 {
		r.ChunksUnrouted.Add(uint64(n))
		c.orphan.ReadCommit(&unrouted, nil, nil)
	}
	// 2. Hand each instance its part (re-encoded: the service decodes and
	// validates it again, as any producer's commit).
	for i := range c.split {
		rc := &c.split[i]
		l := rc.to.link
		l.Deliver(rc.cd.AppendMarshal(l.CommitBuffer()))
		rc.to = nil
	}
	// 3. The acknowledgement, after the data it covers.
	if id := cd.FlushRequestID; id != 0 {
		c.acked(id)
	}
}

// soleRouteLocked is the one instance that receives every chunk and patch
// of cd, or nil when they go to several (or to none), or when cd
// acknowledges a flush (c.mu held).
func (c *perfettoConn) soleRouteLocked(cd *smb.CommitData) *perfettoSide {
	if cd.FlushRequestID != 0 {
		return nil
	}
	var to *perfettoSide
	same := func(buf uint32) bool {
		r := c.routeLocked(buf)
		if to == nil {
			to = r
		}
		return r != nil && r == to
	}
	for i := range cd.ChunksToMove {
		if !same(cd.ChunksToMove[i].TargetBuffer) {
			return nil
		}
	}
	for i := range cd.ChunksToPatch {
		if !same(cd.ChunksToPatch[i].TargetBuffer) {
			return nil
		}
	}
	return to
}

// routeLocked is the instance receiving buffer buf's chunks (c.mu held).
// A target buffer of 0 (unset) goes to the connection's only route, if it
// has exactly one.
func (c *perfettoConn) routeLocked(buf uint32) *perfettoSide {
	if buf == 0 && len(c.routes) == 1 {
		for _, to := range c.routes {
			return to[0]
		}
	}
	if to := c.routes[buf]; len(to) > 0 {
		return to[0]
	}
	return nil
}

// acked wakes the flushes acknowledged by request id (a producer answers
// in order, so every older one too).
func (c *perfettoConn) acked(id uint64) {
	c.mu.Lock()
	kept := c.flushes[:0]
	for _, f := range c.flushes {
		if f.req <= id && !f.acked {
			f.acked = true
			close(f.done)
		}
		if !f.acked || f.left > 0 {
			kept = append(kept, f)
		}
	}
	clear(c.flushes[len(kept):])
	c.flushes = kept
	c.mu.Unlock()
}

// DataSourceStarted implements perfettoipc.Backend.
func (r *Producers) DataSourceStarted(pp *perfettoipc.Producer, id uint64) {
	if s := r.instance(pp, id); s != nil {
		s.startedOnce.Do(func() { close(s.started) })
	}
}

// DataSourceStopped implements perfettoipc.Backend.
func (r *Producers) DataSourceStopped(pp *perfettoipc.Producer, id uint64) {
	if s := r.instance(pp, id); s != nil {
		s.stoppedOnce.Do(func() { close(s.stopped) })
	}
}

func (r *Producers) instance(pp *perfettoipc.Producer, id uint64) *perfettoSide {
	c := r.find(pp)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.instances[id]
}

// ActivateTriggers implements perfettoipc.TriggerBackend: every running
// session with a trigger_config checks the triggers as activated by the
// producer (its producer_name, for producer_name_regex), as traced does.
func (r *Producers) ActivateTriggers(pp *perfettoipc.Producer, names []string) {
	r.mu.Lock()
	targets := make([]*pipeline.Service, 0, len(r.triggerTargets))
	for s := range r.triggerTargets {
		targets = append(targets, s)
	}
	r.mu.Unlock()
	for _, s := range targets {
		s.ActivateTriggersFrom(pp.Name(), int64(pp.Peer().UID), names) // never blocks
	}
}

// WatchTriggers implements pipeline.RemoteProducers: s is a target of
// producers' triggers until the returned function is called (s has a
// trigger_config).
func (r *Producers) WatchTriggers(s *pipeline.Service) (unwatch func()) {
	r.mu.Lock()
	if r.triggerTargets == nil {
		r.triggerTargets = map[*pipeline.Service]struct{}{}
	}
	r.triggerTargets[s] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.triggerTargets, s)
		r.mu.Unlock()
	}
}

// Counts implements pipeline.RemoteProducers: the producers connected, the producers ever connected, the
// data sources registered now (every producer's) and the instances ever
// made: traced's producers_connected, producers_seen,
// data_sources_registered and data_sources_seen.
func (r *Producers) Counts() (connected, seen, registered, instances uint64) {
	r.mu.Lock()
	conns := append([]*perfettoConn(nil), r.conns...)
	seen = uint64(r.lastID)
	r.mu.Unlock()
	for _, c := range conns {
		registered += uint64(len(c.pp.DataSources()))
	}
	return uint64(len(conns)), seen, registered, r.nextInstance.Load()
}

// DataSource is one data source a connected producer registered.
type DataSource struct {
	Name     string
	Producer string // producer_name (untrusted)
	PID      int32  // from the socket
	UID      uint32
}

// DataSources lists what the connected producers registered, by name.
func (r *Producers) DataSources() []DataSource {
	r.mu.Lock()
	conns := append([]*perfettoConn(nil), r.conns...)
	r.mu.Unlock()
	var out []DataSource
	for _, c := range conns {
		for _, d := range c.pp.DataSources() {
			out = append(out, DataSource{Name: d.GetName(), Producer: c.pp.Name(), PID: c.pp.Peer().PID, UID: c.pp.Peer().UID})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// WaitFor waits until every name is registered by a connected producer,
// or ctx ends; it returns the names still missing.
func (r *Producers) WaitFor(ctx context.Context, names []string) []string {
	for {
		r.mu.Lock()
		changed := r.changed
		r.mu.Unlock()
		have := map[string]bool{}
		for _, d := range r.DataSources() {
			have[d.Name] = true
		}
		var missing []string
		for _, n := range names {
			if !have[n] {
				missing = append(missing, n)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return missing
		}
	}
}

// matching returns the connected producers that registered name, with
// their descriptors, in connection order: those admits admits (nil:
// every one).
func (r *Producers) matching(name string, admits func(producer string) bool) ([]*perfettoConn, []*perfettoipc.DataSourceDescriptor) {
	r.mu.Lock()
	conns := append([]*perfettoConn(nil), r.conns...)
	r.mu.Unlock()
	var cs []*perfettoConn
	var ds []*perfettoipc.DataSourceDescriptor
	for _, c := range conns {
		if admits != nil && !admits(c.pp.Name()) {
			continue
		}
		for _, d := range c.pp.DataSources() {
			if d.GetName() == name {
				cs = append(cs, c)
				ds = append(ds, d)
				break
			}
		}
	}
	return cs, ds
}

// Serves implements pipeline.RemoteProducers: whether the session binds Perfetto producers for a data
// source name: when one registered it (it wins over a built-in data
// source of the same name, as the producer is what the user runs), and
// for every name that is not built in (producers that register it later
// join the session). False for a nil set.
func (r *Producers) Serves(name string) bool {
	if r == nil {
		return false
	}
	if _, builtin := plugins.Lookup(name); !builtin {
		return true
	}
	conns, _ := r.matching(name, nil)
	return len(conns) > 0
}

// HasProducerFor says whether a connected producer that dc's
// producer_name_filter and producer_name_regex_filter admit registered
// dc.Name (false for a nil set): whether a Perfetto consumer's session
// has a producer for the data source.
func (r *Producers) HasProducerFor(dc *config.DataSourceConfig) bool {
	return r.has(dc.Name, dc.AdmitsProducer)
}

// NewSessionID hands out a tracing_session_id, unique among the sessions
// of this set's producers (traced's): a Perfetto consumer's session takes
// one before New (Options.TracingSessionID).
func (r *Producers) NewSessionID() uint64 { return r.nextSession.Add(1) }

// AppendServiceState adds the connected producers, and the data sources
// they registered (sorted by name, then producer id), to st as traced's
// QueryServiceState lists them.
func (r *Producers) AppendServiceState(st *perfettoipc.TracingServiceState) {
	r.mu.Lock()
	conns := append([]*perfettoConn(nil), r.conns...)
	r.mu.Unlock()
	for _, c := range conns {
		peer := c.pp.Peer()
		st.Producers = append(st.Producers, &perfettoipc.TracingServiceState_Producer{
			Id: proto.Int32(c.id), Name: proto.String(c.pp.Name()), Uid: proto.Int32(int32(peer.UID)),
			SdkVersion: proto.String(c.pp.SDKVersion()), Pid: proto.Int32(peer.PID), Frozen: proto.Bool(false),
		})
		for _, d := range c.pp.DataSources() {
			st.DataSources = append(st.DataSources, &perfettoipc.TracingServiceState_DataSource{DsDescriptor: d, ProducerId: proto.Int32(c.id)})
		}
	}
	sort.SliceStable(st.DataSources, func(i, j int) bool {
		a, b := st.DataSources[i], st.DataSources[j]
		if a.GetDsDescriptor().GetName() != b.GetDsDescriptor().GetName() {
			return a.GetDsDescriptor().GetName() < b.GetDsDescriptor().GetName()
		}
		return a.GetProducerId() < b.GetProducerId()
	})
}

// has says whether a connected producer (admitted, if admits is set)
// registered name (false for a nil set).
func (r *Producers) has(name string, admits func(producer string) bool) bool {
	if r == nil {
		return false
	}
	conns, _ := r.matching(name, admits)
	return len(conns) > 0
}

// Bind implements pipeline.RemoteSession: one instance per connected
// Perfetto producer that registered data_sources[index].name and that its
// producer filters admit. (The buffer-exhausted policy is the producer's
// own: its SDK applies it.)
func (sess *perfettoSession) Bind(index int, dc *config.DataSourceConfig, duration time.Duration, bound func(conn any) bool) ([]pipeline.RemoteInstance, error) {
	r := sess.r
	conns, descs := r.matching(dc.Name, dc.AdmitsProducer)
	var out []pipeline.RemoteInstance
	var errs []error
	for k, c := range conns {
		if bound != nil && bound(c) {
			continue
		}
		in, err := sess.newInstance(index, dc, duration, c, descs[k])
		if err != nil {
			if bound == nil {
				return out, err
			}
			errs = append(errs, err)
			continue
		}
		out = append(out, in)
	}
	return out, errors.Join(errs...)
}

// newInstance builds the data source instance through which connection c
// serves data_sources[index] (dc) in the session.
func (sess *perfettoSession) newInstance(index int, dc *config.DataSourceConfig, duration time.Duration, c *perfettoConn, desc *perfettoipc.DataSourceDescriptor) (pipeline.RemoteInstance, error) {
	r := sess.r
	source := fmt.Sprintf("perfetto producer %q pid %d", c.pp.Name(), c.pp.Peer().PID)
	wire := sess.buffers[dc.TargetBuffer]
	// The consumer's config keeps its data-source specific fields
	// (unknown to this proto, kept as such); the service sets the rest,
	// as traced does.
	cfg := &perfettoipc.DataSourceConfig{}
	if raw := dc.RawPerfettoConfig(); len(raw) > 0 {
		if err := proto.Unmarshal(raw, cfg); err != nil {
			return pipeline.RemoteInstance{}, fmt.Errorf("data_sources[%d]: the consumer's DataSourceConfig: %w", index, err)
		}
	}
	cfg.Name = proto.String(desc.GetName())
	cfg.TargetBuffer = proto.Uint32(wire)
	cfg.TraceDurationMs = proto.Uint32(uint32(duration.Milliseconds()))
	cfg.TracingSessionId = proto.Uint64(sess.id)
	cfg.EnableExtraGuardrails = proto.Bool(false)
	cfg.StopTimeoutMs = proto.Uint32(uint32(perfettoWait.Milliseconds()))
	cfg.SessionInitiator = perfettoipc.DataSourceConfig_SESSION_INITIATOR_UNSPECIFIED.Enum()

	own := c.pp.SMB()
	if own == nil {
		return pipeline.RemoteInstance{}, fmt.Errorf("data_sources[%d]: %s has no shared memory buffer", index, source)
	}
	// The service maps the producer's memfd itself, so that its view
	// lives and dies with the session, not with the connection.
	fd, err := unix.FcntlInt(uintptr(own.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return pipeline.RemoteInstance{}, fmt.Errorf("data_sources[%d]: %s: duplicating its SMB: %w", index, source, err)
	}
	view, err := smb.MapFD(fd, own.PageSize())
	if err != nil {
		unix.Close(fd)
		return pipeline.RemoteInstance{}, fmt.Errorf("data_sources[%d]: %s: mapping its SMB: %w", index, source, err)
	}
	peer := c.pp.Peer()
	ps := &perfettoSide{
		conn: c, desc: desc, sess: sess, cfg: cfg, wire: wire,
		instance: r.nextInstance.Add(1),
		started:  make(chan struct{}), stopped: make(chan struct{}),
	}
	return pipeline.RemoteInstance{
		Transport: ps, SMB: view, Client: buffer.ClientIdentity{UID: int32(peer.UID), PID: peer.PID},
		Source: source, Name: c.pp.Name(), Wire: wire, Conn: c, Scrapes: ps.scrapes,
	}, nil
}

var _ pipeline.Transport = (*perfettoSide)(nil)
var _ pipeline.Sequenced = (*perfettoSide)(nil)

// perfettoSide is one data source instance served by a Perfetto producer
// over IPC: commands go on the connection's GetAsyncCommand stream, its
// commits and notifications come back through Producers.
type perfettoSide struct {
	conn     *perfettoConn
	link     pipeline.Link // set by setup, before any commit is routed to it
	wire     uint32        // the global buffer id it writes
	desc     *perfettoipc.DataSourceDescriptor
	sess     *perfettoSession
	instance uint64
	cfg      *perfettoipc.DataSourceConfig // as sent to the producer

	setupOnce, startOnce, stopOnce sync.Once
	setupErr                       error
	// live: set up and not stopped; guarded by conn.mu.
	live bool

	started, stopped         chan struct{}
	startedOnce, stoppedOnce sync.Once
}

// perfettoWait bounds a wait for a producer's answer (start or stop
// notification, flush ack); Perfetto's own default stop timeout, which is
// the session's stop timeout too.
var perfettoWait = 5 * time.Second

var errPerfettoGone = errors.New("the Perfetto producer disconnected")

// setup binds the instance on its connection (its buffer's chunks come
// to it from now on) and sends setup_data_source (with the SMB, the
// first time). Once.
func (ps *perfettoSide) setup(link pipeline.Link) error {
	ps.setupOnce.Do(func() {
		c := ps.conn
		c.mu.Lock()
		ps.link = link
		c.instances[ps.instance] = ps
		c.routes[ps.wire] = append(c.routes[ps.wire], ps)
		ps.live = true
		c.mu.Unlock()
		ps.setupErr = c.pp.SetupDataSource(ps.instance, ps.cfg)
	})
	return ps.setupErr
}

// begin sends start_data_source once set up. Once.
func (ps *perfettoSide) begin(link pipeline.Link) error {
	if err := ps.setup(link); err != nil {
		return err
	}
	ps.startOnce.Do(func() { ps.conn.pp.StartDataSource(ps.instance, ps.cfg) })
	return nil
}

// sendStop sends stop_data_source (if the instance was set up). Once.
func (ps *perfettoSide) sendStop() {
	ps.stopOnce.Do(func() {
		c := ps.conn
		c.mu.Lock()
		wasLive := ps.live
		ps.live = false
		c.mu.Unlock()
		if wasLive {
			c.pp.StopDataSource(ps.instance)
		}
	})
}

// Setup implements pipeline.Sequenced: as traced, the session sends
// every setup_data_source before any start_data_source. Commands are
// queued, never waited for; each instance's control goroutine then waits
// for its own notification in Start.
func (ps *perfettoSide) Setup(link pipeline.Link) error { return ps.setup(link) }

// Begin implements pipeline.Sequenced: start_data_source, once set up.
func (ps *perfettoSide) Begin() { _ = ps.begin(ps.link) }

// SendStop implements pipeline.Sequenced: stop_data_source, in session
// order, before the control goroutine waits in Stop.
func (ps *perfettoSide) SendStop() { ps.sendStop() }

func (ps *perfettoSide) Start(link pipeline.Link) error {
	if err := ps.begin(link); err != nil {
		return err
	}
	if !ps.desc.GetWillNotifyOnStart() {
		return nil
	}
	return ps.await(ps.started, "NotifyDataSourceStarted")
}

// await waits for ch, the producer's disconnection or perfettoWait.
func (ps *perfettoSide) await(ch <-chan struct{}, what string) error {
	t := time.NewTimer(perfettoWait)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ps.conn.gone:
		// The notification may have come just before the hang-up.
		select {
		case <-ch:
			return nil
		default:
		}
		return errPerfettoGone
	case <-t.C:
		return fmt.Errorf("no %s within %v", what, perfettoWait)
	}
}

// scrapes says whether a chunk of trace writer w, scraped from the shared
// SMB, is this instance's to copy: the writer was registered for its
// buffer and the instance receives that buffer's chunks. A writer never
// registered belongs to the instance only if it is the connection's one
// instance.
func (ps *perfettoSide) scrapes(w uint16) bool {
	c := ps.conn
	target, ok := c.pp.WriterTarget(w)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !ok {
		return len(c.instances) == 1 && c.instances[ps.instance] == ps
	}
	return target == ps.wire && c.routeLocked(target) == ps
}

// Flush makes the producer commit what the instance wrote: the first
// instance of a session asked for flush id sends one flush command for
// every live instance of that session on the connection (traced's one
// Flush per producer); the others wait on the same acknowledgement. Each
// then hands its service the acknowledgement of id, after the data.
func (ps *perfettoSide) Flush(id uint64, flags plugins.FlushFlags) error {
	ack := func() {
		var cd smb.CommitData
		cd.FlushRequestID = id
		ps.link.Deliver(cd.AppendMarshal(ps.link.CommitBuffer()))
	}
	if ps.desc.GetNoFlush() {
		// traced sends no flush to such data sources; the service scrapes
		// their SMB after the flush. Acknowledge for the producer.
		ack()
		return nil
	}
	c := ps.conn
	c.mu.Lock()
	var f *connFlush
	for _, g := range c.flushes {
		if g.sess == ps.sess && g.svcID == id && slices.Contains(g.ids, ps.instance) {
			f = g
		}
	}
	send := f == nil
	if f != nil {
		f.left--
		if f.acked && f.left <= 0 {
			c.flushes = slices.DeleteFunc(c.flushes, func(g *connFlush) bool { return g == f })
		}
	} else {
		// An acknowledged flush of the session that some instance never
		// joined (it was busy) is superseded by this one.
		c.flushes = slices.DeleteFunc(c.flushes, func(g *connFlush) bool { return g.sess == ps.sess && g.acked })
		f = &connFlush{sess: ps.sess, svcID: id, req: c.r.nextFlush.Add(1), done: make(chan struct{})}
		for _, o := range c.instances {
			if o.sess == ps.sess && o.live && !o.desc.GetNoFlush() || o == ps {
				f.ids = append(f.ids, o.instance)
			}
		}
		slices.Sort(f.ids)
		f.left = len(f.ids) - 1 // this instance joined
		if len(c.flushes) >= maxConnFlushes {
			c.flushes = slices.Delete(c.flushes, 0, 1) // its waiters time out
		}
		c.flushes = append(c.flushes, f)
	}
	c.mu.Unlock()
	if send {
		c.pp.Flush(f.ids, f.req, uint64(flags))
	}
	t := time.NewTimer(perfettoWait)
	defer t.Stop()
	select {
	case <-f.done:
		ack()
		return nil
	case <-c.gone:
		return errPerfettoGone
	case <-t.C:
		return fmt.Errorf("no flush acknowledgement within %v", perfettoWait)
	}
}

func (ps *perfettoSide) ClearIncrementalState() {
	if ps.desc.GetHandlesIncrementalStateClear() {
		ps.conn.pp.ClearIncrementalState([]uint64{ps.instance})
	}
}

func (ps *perfettoSide) Stop() error {
	ps.sendStop()
	if !ps.desc.GetWillNotifyOnStop() {
		return nil
	}
	if err := ps.await(ps.stopped, "NotifyDataSourceStopped"); err != nil {
		if errors.Is(err, errPerfettoGone) {
			return err
		}
		return fmt.Errorf("%w: %v", pipeline.ErrStopTimeout, err)
	}
	return nil
}

// PacketsDropped: the producer's own losses reach the service through its
// chunks (dropped-packet sentinels), not through a counter it could trust.
func (ps *perfettoSide) PacketsDropped() uint64 { return 0 }
func (ps *perfettoSide) Done() <-chan struct{}  { return nil }
func (ps *perfettoSide) Exited() <-chan struct{} {
	return ps.conn.gone
}
func (ps *perfettoSide) ExitErr() error {
	return fmt.Errorf("Perfetto producer %q (pid %d) disconnected", ps.conn.pp.Name(), ps.conn.pp.Peer().PID)
}

// Close unbinds the instance: chunks for its buffer go to the next
// instance writing it, or nowhere (counted, dropped).
func (ps *perfettoSide) Close() {
	c := ps.conn
	c.mu.Lock()
	if c.instances[ps.instance] == ps {
		delete(c.instances, ps.instance)
	}
	if to := c.routes[ps.wire]; to != nil {
		to = slices.DeleteFunc(to, func(o *perfettoSide) bool { return o == ps })
		if len(to) == 0 {
			delete(c.routes, ps.wire)
		} else {
			c.routes[ps.wire] = to
		}
	}
	c.mu.Unlock()
}
