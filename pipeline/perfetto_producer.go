package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/buffer"
	"github.com/tracepipe/tracepipe/perfettoipc"
	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/smb"
)

// PerfettoProducers is the set of Perfetto producers (SDK apps,
// traced_probes) connected to tracepipe's producer socket: the
// perfettoipc.Backend of a perfettoipc ProducerPort. Producers connect
// and register data sources whenever they like; a session (Options.Perfetto)
// binds, for each data_sources[i] that is neither built in nor a plugin,
// every connected producer that registered that name. Each binding is one
// more producer of the service: the producer's SMB is mapped by the
// service, its CommitData goes through the same decoder, reader, buffers
// and loss accounting as a plugin's, and its trusted identity is the
// socket's (SO_PEERCRED).
//
// A producer serves one session at a time, and within a session one
// data_sources[i] (the first that names one of its data sources).
type PerfettoProducers struct {
	mu      sync.Mutex
	conns   []*perfettoConn
	changed chan struct{} // closed and replaced on every change
	lastID  int32
	// Commits that arrived while no session was bound (dropped).
	CommitsUnbound atomic.Uint64

	nextInstance atomic.Uint64
	nextSession  atomic.Uint64
}

// NewPerfettoProducers returns an empty set.
func NewPerfettoProducers() *PerfettoProducers {
	return &PerfettoProducers{changed: make(chan struct{})}
}

type perfettoConn struct {
	id   int32 // producer id in QueryServiceState (connection order)
	pp   *perfettoipc.Producer
	gone chan struct{} // closed when the connection ended

	mu   sync.Mutex
	side *perfettoSide // the session side its commits go to (nil: none)
	cd   smb.CommitData
}

func (r *PerfettoProducers) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *PerfettoProducers) find(pp *perfettoipc.Producer) *perfettoConn {
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
func (r *PerfettoProducers) Connected(pp *perfettoipc.Producer) {
	r.mu.Lock()
	r.lastID++
	r.conns = append(r.conns, &perfettoConn{id: r.lastID, pp: pp, gone: make(chan struct{})})
	r.notify()
	r.mu.Unlock()
}

// Disconnected implements perfettoipc.Backend: a bound session sees its
// data source die, as a plugin process that exited.
func (r *PerfettoProducers) Disconnected(pp *perfettoipc.Producer) {
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
func (r *PerfettoProducers) DataSourceRegistered(*perfettoipc.Producer, *perfettoipc.DataSourceDescriptor) {
	r.mu.Lock()
	r.notify()
	r.mu.Unlock()
}

// DataSourceUnregistered implements perfettoipc.Backend.
func (r *PerfettoProducers) DataSourceUnregistered(*perfettoipc.Producer, string) {
	r.mu.Lock()
	r.notify()
	r.mu.Unlock()
}

// Commit implements perfettoipc.Backend: the bytes go to the bound
// session's service exactly as a plugin's commit does (deliver blocks
// while the service's commit queue is full: backpressure on this one
// producer's connection). A flush acknowledgement also wakes the side.
func (r *PerfettoProducers) Commit(pp *perfettoipc.Producer, data []byte) {
	c := r.find(pp)
	if c == nil {
		return
	}
	c.mu.Lock()
	side := c.side
	c.mu.Unlock()
	if side == nil {
		r.CommitsUnbound.Add(1)
		return
	}
	p := side.p
	p.deliver(append(p.commitBuffer(), data...))
	// The service decodes (and validates) the copy; here only the flush
	// id matters, and a malformed commit has none.
	if c.cd.Unmarshal(data) == nil && c.cd.FlushRequestID != 0 {
		select {
		case side.acks <- c.cd.FlushRequestID:
		default:
		}
	}
}

// DataSourceStarted implements perfettoipc.Backend.
func (r *PerfettoProducers) DataSourceStarted(pp *perfettoipc.Producer, id uint64) {
	if s := r.sideOf(pp); s != nil && id == s.instance {
		s.startedOnce.Do(func() { close(s.started) })
	}
}

// DataSourceStopped implements perfettoipc.Backend.
func (r *PerfettoProducers) DataSourceStopped(pp *perfettoipc.Producer, id uint64) {
	if s := r.sideOf(pp); s != nil && id == s.instance {
		s.stoppedOnce.Do(func() { close(s.stopped) })
	}
}

func (r *PerfettoProducers) sideOf(pp *perfettoipc.Producer) *perfettoSide {
	c := r.find(pp)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.side
}

// PerfettoDataSource is one data source a connected producer registered.
type PerfettoDataSource struct {
	Name     string
	Producer string // producer_name (untrusted)
	PID      int32  // from the socket
	UID      uint32
}

// DataSources lists what the connected producers registered, by name.
func (r *PerfettoProducers) DataSources() []PerfettoDataSource {
	r.mu.Lock()
	conns := append([]*perfettoConn(nil), r.conns...)
	r.mu.Unlock()
	var out []PerfettoDataSource
	for _, c := range conns {
		for _, d := range c.pp.DataSources() {
			out = append(out, PerfettoDataSource{Name: d.GetName(), Producer: c.pp.Name(), PID: c.pp.Peer().PID, UID: c.pp.Peer().UID})
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
func (r *PerfettoProducers) WaitFor(ctx context.Context, names []string) []string {
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
// their descriptors, in connection order; with a filter (a consumer's
// producer_name_filter), only those whose producer_name it lists.
func (r *PerfettoProducers) matching(name string, filter ...string) ([]*perfettoConn, []*perfettoipc.DataSourceDescriptor) {
	r.mu.Lock()
	conns := append([]*perfettoConn(nil), r.conns...)
	r.mu.Unlock()
	var cs []*perfettoConn
	var ds []*perfettoipc.DataSourceDescriptor
	for _, c := range conns {
		if len(filter) > 0 && !slices.Contains(filter, c.pp.Name()) {
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

// serves says whether the session binds Perfetto producers for a data
// source name: when one registered it (it wins over a built-in data
// source of the same name, as the producer is what the user runs), and
// for every name that is not built in (New then says which producers
// registered what). False for a nil set.
func (r *PerfettoProducers) serves(name string) bool {
	if r == nil {
		return false
	}
	if _, builtin := plugins.Lookup(name); !builtin {
		return true
	}
	conns, _ := r.matching(name)
	return len(conns) > 0
}

// has says whether a connected producer (named in filter, if any)
// registered name (false for a nil set).
func (r *PerfettoProducers) has(name string, filter []string) bool {
	if r == nil {
		return false
	}
	conns, _ := r.matching(name, filter...)
	return len(conns) > 0
}

// addPerfettoProducers adds one producer per connected Perfetto producer
// that registered data_sources[i].name. (The buffer-exhausted policy is
// the producer's own: its SDK applies it.)
func (s *Service) addPerfettoProducers(i int) error {
	dc := &s.cfg.DataSources[i]
	spec := producerSpec{index: i, name: dc.Name, target: dc.TargetBuffer, source: dc.Name,
		abortOnStartError: dc.OnStartError == OnStartErrorAbort}
	r := s.opts.Perfetto
	conns, descs := r.matching(spec.name, dc.perfettoProducers...)
	if len(conns) == 0 {
		var have []string
		for _, d := range r.DataSources() {
			have = append(have, fmt.Sprintf("%s (%s, pid %d)", d.Name, d.Producer, d.PID))
		}
		if len(have) == 0 {
			have = []string{"none"}
		}
		return fmt.Errorf("data_sources[%d].name: %q is not built in, and no connected Perfetto producer registered it (registered: %s)",
			spec.index, spec.name, strings.Join(have, ", "))
	}
	session := r.nextSession.Add(1)
	for k, c := range conns {
		p, err := s.newPerfettoProducer(spec, c, descs[k], session)
		if err != nil {
			return err
		}
		s.producers = append(s.producers, p)
	}
	return nil
}

// newPerfettoProducer builds the producer through which connection c
// serves data_sources[spec.index] in tracing session session.
func (s *Service) newPerfettoProducer(spec producerSpec, c *perfettoConn, desc *perfettoipc.DataSourceDescriptor, session uint64) (*producer, error) {
	r := s.opts.Perfetto
	sp := spec
	sp.id = uint16(len(s.producers) + 1)
	sp.source = fmt.Sprintf("perfetto producer %q pid %d", c.pp.Name(), c.pp.Peer().PID)
	own := c.pp.SMB()
	if own == nil {
		return nil, fmt.Errorf("data_sources[%d]: %s has no shared memory buffer", spec.index, sp.source)
	}
	// The service maps the producer's memfd itself, so that its view
	// lives and dies with the session, not with the connection.
	fd, err := unix.FcntlInt(uintptr(own.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("data_sources[%d]: %s: duplicating its SMB: %w", spec.index, sp.source, err)
	}
	view, err := smb.MapFD(fd, own.PageSize())
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("data_sources[%d]: %s: mapping its SMB: %w", spec.index, sp.source, err)
	}
	peer := c.pp.Peer()
	client := buffer.ClientIdentity{UID: int32(peer.UID), PID: peer.PID}
	p := newProducer(sp, view, client, s.commits, s.notes, s.finished)
	p.side = &perfettoSide{
		conn: c, p: p, desc: desc, session: session,
		raw:      s.cfg.DataSources[spec.index].perfettoConfig,
		instance: r.nextInstance.Add(1),
		duration: s.cfg.Duration,
		acks:     make(chan uint64, 4),
		started:  make(chan struct{}), stopped: make(chan struct{}),
	}
	p.onChunk = func(v *smb.ChunkView) { s.copyChunk(p, v) }
	p.onPatch = func(c *smb.ChunkToPatch) { s.patchChunk(p, c) }
	return p, nil
}

// perfettoSide is the side of a data source instance served by a Perfetto
// producer over IPC: commands go on its GetAsyncCommand stream, its
// commits and notifications come back through PerfettoProducers.
type perfettoSide struct {
	conn     *perfettoConn
	p        *producer
	desc     *perfettoipc.DataSourceDescriptor
	session  uint64
	instance uint64
	duration time.Duration
	raw      []byte // the consumer's DataSourceConfig, if a consumer started the session

	acks                     chan uint64
	started, stopped         chan struct{}
	startedOnce, stoppedOnce sync.Once
	bound                    bool
}

// perfettoWait bounds a wait for a producer's answer (start or stop
// notification, flush ack); Perfetto's own default stop timeout.
var perfettoWait = stopTimeout

var errPerfettoGone = errors.New("the Perfetto producer disconnected")

func (ps *perfettoSide) start(p *producer) error {
	c := ps.conn
	c.mu.Lock()
	if c.side != nil {
		c.mu.Unlock()
		return fmt.Errorf("the producer already serves another data source or session")
	}
	c.side = ps
	ps.bound = true
	c.mu.Unlock()
	// The consumer's config keeps its data-source specific fields
	// (unknown to this proto, kept as such); the service sets the rest,
	// as traced does.
	cfg := &perfettoipc.DataSourceConfig{}
	if len(ps.raw) > 0 {
		if err := proto.Unmarshal(ps.raw, cfg); err != nil {
			return fmt.Errorf("the consumer's DataSourceConfig: %w", err)
		}
	}
	cfg.Name = proto.String(ps.desc.GetName())
	cfg.TargetBuffer = proto.Uint32(bufferID(p.target))
	cfg.TraceDurationMs = proto.Uint32(uint32(ps.duration.Milliseconds()))
	cfg.TracingSessionId = proto.Uint64(ps.session)
	cfg.EnableExtraGuardrails = proto.Bool(false)
	cfg.StopTimeoutMs = proto.Uint32(uint32(perfettoWait.Milliseconds()))
	cfg.SessionInitiator = perfettoipc.DataSourceConfig_SESSION_INITIATOR_UNSPECIFIED.Enum()
	if err := c.pp.StartDataSource(ps.instance, cfg); err != nil {
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

func (ps *perfettoSide) flush(id uint64, flags plugins.FlushFlags) error {
	if ps.desc.GetNoFlush() {
		// traced sends no flush to such data sources; the service scrapes
		// their SMB after the flush. Acknowledge for the producer.
		var cd smb.CommitData
		cd.FlushRequestID = id
		ps.p.deliver(cd.AppendMarshal(ps.p.commitBuffer()))
		return nil
	}
	ps.conn.pp.Flush([]uint64{ps.instance}, id, uint64(flags))
	t := time.NewTimer(perfettoWait)
	defer t.Stop()
	for {
		select {
		case got := <-ps.acks:
			if got >= id {
				return nil
			}
		case <-ps.conn.gone:
			return errPerfettoGone
		case <-t.C:
			return fmt.Errorf("no flush acknowledgement within %v", perfettoWait)
		}
	}
}

func (ps *perfettoSide) clearIncrementalState() {
	if ps.desc.GetHandlesIncrementalStateClear() {
		ps.conn.pp.ClearIncrementalState([]uint64{ps.instance})
	}
}

func (ps *perfettoSide) stop() error {
	ps.conn.pp.StopDataSource(ps.instance)
	if !ps.desc.GetWillNotifyOnStop() {
		return nil
	}
	if err := ps.await(ps.stopped, "NotifyDataSourceStopped"); err != nil {
		if errors.Is(err, errPerfettoGone) {
			return err
		}
		return fmt.Errorf("%w: %v", errStopTimeout, err)
	}
	return nil
}

// packetsDropped: the producer's own losses reach the service through its
// chunks (dropped-packet sentinels), not through a counter it could trust.
func (ps *perfettoSide) packetsDropped() uint64 { return 0 }
func (ps *perfettoSide) done() <-chan struct{}  { return nil }
func (ps *perfettoSide) exited() <-chan struct{} {
	return ps.conn.gone
}
func (ps *perfettoSide) exitErr() error {
	return fmt.Errorf("Perfetto producer %q (pid %d) disconnected", ps.conn.pp.Name(), ps.conn.pp.Peer().PID)
}

// close unbinds the producer: later commits are dropped, and the next
// session may bind it.
func (ps *perfettoSide) close() {
	c := ps.conn
	c.mu.Lock()
	if c.side == ps {
		c.side = nil
	}
	c.mu.Unlock()
}
