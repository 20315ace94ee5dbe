package perfettoipc

import (
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// ConsumerPortMethods is ConsumerPort's method table in Perfetto's
// declaration order (method id = position + 1).
var ConsumerPortMethods = []string{
	"EnableTracing", "DisableTracing", "ReadBuffers", "FreeBuffers", "Flush",
	"StartTracing", "ChangeTraceConfig", "Detach", "Attach", "GetTraceStats",
	"ObserveEvents", "QueryServiceState", "QueryCapabilities", "SaveTraceForBugreport",
	"CloneSession",
}

// ConsumerPort method ids.
const (
	mEnableTracing uint32 = iota + 1
	mDisableTracing
	mReadBuffers
	mFreeBuffers
	mFlush
	mStartTracing
	mChangeTraceConfig
	mDetach
	mAttach
	mGetTraceStats
	mObserveEvents
	mQueryServiceState
	mQueryCapabilities
	mSaveTraceForBugreport
	mCloneSession
)

// maxQueuedEvents bounds the ObserveEvents events waiting for a consumer.
const maxQueuedEvents = 64

// readBuffersReplyBytes is the packet bytes per ReadBuffers reply, as
// traced (~32 KiB): far below the frame bound with the slice overhead.
const readBuffersReplyBytes = 32 << 10

// ConsumerBackend is the tracing service behind the consumer port.
type ConsumerBackend interface {
	// EnableTracing starts a session with a serialized TraceConfig
	// (untrusted). outFD (>= 0) is the output file of write_into_file; the
	// session owns it from now on, even on error.
	EnableTracing(peer Peer, traceConfig []byte, outFD int) (ConsumerSession, error)
	// QueryServiceState describes the service to peer: as traced, it
	// lists only the sessions peer may clone (its own uid's, all for
	// root).
	QueryServiceState(peer Peer, sessionsOnly bool) *TracingServiceState
	// CloneSession clones a running session for peer, as traced's
	// CloneSession: the clone is a finished, read-only session that
	// ReadBuffers drains. A failure is a response with success false and
	// an error, and a nil session.
	CloneSession(peer Peer, r *CloneSessionRequest) (ConsumerSession, *CloneSessionResponse)
}

// ConsumerSession is one session a consumer enabled.
type ConsumerSession interface {
	// Done is closed when the session ended; Err then says why it ended
	// badly (nil: it ran to its end).
	Done() <-chan struct{}
	Err() error
	// Disable stops the session gracefully (final flush, final read).
	Disable()
	// Flush flushes the producers, bounded by timeout (0: the session's
	// own flush timeout, as traced's default for timeout_ms 0).
	Flush(timeout time.Duration, flags uint64) error
	// ReadPackets takes up to about maxBytes of the packets read so far
	// (at least one packet if there is any), oldest first.
	ReadPackets(maxBytes int) [][]byte
	// Free drops what was not read.
	Free()
	// TraceStats is the session's TraceStats message as of now, encoded.
	TraceStats() ([]byte, error)
	// WritesIntoFile: the session writes a file, ReadBuffers is refused.
	WritesIntoFile() bool
	// Start starts a session enabled with deferred_start (StartTracing).
	Start() error
	// ChangeTraceConfig applies a new TraceConfig to the running session.
	ChangeTraceConfig(traceConfig []byte) error
	// Observe sends the session's events of the types in mask (bits of
	// ObservableEvents.Type values) to emit, from any goroutine, until
	// cancel or the session's end; emit must not block for long.
	Observe(mask uint32, emit func(*ObservableEvents)) (cancel func(), err error)
}

// NewConsumerPort returns the ConsumerPort service for a Host.
func NewConsumerPort(b ConsumerBackend) *Service {
	d := &detachedSessions{m: map[detachKey]*detached{}}
	return &Service{Name: "ConsumerPort", Methods: ConsumerPortMethods, Open: func(c *Conn) Handler {
		return &consumer{conn: c, backend: b, detached: d}
	}}
}

// maxDetached bounds the sessions waiting for an Attach.
const maxDetached = 64

// detachKey names a detached session: its key within its owner's uid
// (another uid cannot attach to it, as in traced).
type detachKey struct {
	uid uint32
	key string
}

// detached is a session whose consumer detached.
type detached struct {
	sess        ConsumerSession
	traceConfig []byte
}

type detachedSessions struct {
	mu sync.Mutex
	m  map[detachKey]*detached
}

// consumer is one consumer connection: at most one session, ended when
// the consumer disconnects (as traced frees a session whose consumer went
// away without detaching).
type consumer struct {
	conn     *Conn
	backend  ConsumerBackend
	detached *detachedSessions

	mu          sync.Mutex
	sess        ConsumerSession
	traceConfig []byte
	// notify is set when EnableTracing's end-of-session reply must go
	// out; Detach clears it (traced never answers a detached enable).
	notify *enableWaiter
	// observe is the ObserveEvents stream (nil: none) and observeMask the
	// event types it asked for; stopObserve ends the session's side.
	observe     *Call
	observeMask uint32
	stopObserve func()
	observeQ    chan obsItem  // the events being sent
	observeQuit chan struct{} // closed when their sender stopped
	rbuf        []byte        // ReadBuffers replies are encoded here (connection goroutine)
}

// obsItem is an event to send, or a mark closed once the events queued
// before it were sent.
type obsItem struct {
	ev   *ObservableEvents
	mark chan struct{}
}

// observeSent waits (briefly) until the events queued so far were sent:
// a session's last events (its instances stopped) go out before
// EnableTracing's reply, as traced sends them.
func (c *consumer) observeSent() {
	c.mu.Lock()
	q, quit := c.observeQ, c.observeQuit
	c.mu.Unlock()
	if q == nil {
		return
	}
	mark := make(chan struct{})
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case q <- obsItem{mark: mark}:
	case <-quit:
		return
	case <-t.C:
		return
	}
	select {
	case <-mark:
	case <-quit:
	case <-t.C:
	}
}

// enableWaiter sends EnableTracing's reply when the session ends, unless
// the consumer detached in the meantime.
type enableWaiter struct {
	mu       sync.Mutex
	detached bool
}

// DecodeConsumerArgs decodes a ConsumerPort method's arguments (untrusted
// bytes); methods tracepipe does not serve decode as nil.
func DecodeConsumerArgs(method uint32, b []byte) (proto.Message, error) {
	var m proto.Message
	switch method {
	case mEnableTracing:
		m = &EnableTracingRequest{}
	case mDisableTracing:
		m = &DisableTracingRequest{}
	case mReadBuffers:
		m = &ReadBuffersRequest{}
	case mFreeBuffers:
		m = &FreeBuffersRequest{}
	case mFlush:
		m = &FlushRequest{}
	case mStartTracing:
		m = &StartTracingRequest{}
	case mDetach:
		m = &DetachRequest{}
	case mAttach:
		m = &AttachRequest{}
	case mGetTraceStats:
		m = &GetTraceStatsRequest{}
	case mQueryServiceState:
		m = &QueryServiceStateRequest{}
	case mChangeTraceConfig:
		m = &ChangeTraceConfigRequest{}
	case mObserveEvents:
		m = &ObserveEventsRequest{}
	case mQueryCapabilities:
		m = &QueryCapabilitiesRequest{}
	case mCloneSession:
		m = &CloneSessionRequest{}
	default:
		return nil, nil
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

func (c *consumer) session() ConsumerSession {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

func (c *consumer) Close() {
	c.mu.Lock()
	stop := c.stopObserve
	c.stopObserve = nil
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	if s := c.session(); s != nil {
		s.Disable()
	}
}

func (c *consumer) Invoke(method uint32, call *Call) {
	fd := call.TakeFD()
	if fd >= 0 && method != mEnableTracing {
		unix.Close(fd)
		fd = -1
	}
	args, err := DecodeConsumerArgs(method, call.Args)
	if err != nil || args == nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		call.Fail() // undecodable, or a method tracepipe does not serve
		return
	}
	sess := c.session()
	switch method {
	case mEnableTracing:
		c.enable(call, args.(*EnableTracingRequest), fd)
	case mDisableTracing:
		if sess == nil {
			call.Fail()
			return
		}
		sess.Disable()
		_ = call.Reply(&DisableTracingResponse{}, false)
	case mReadBuffers:
		if sess == nil || sess.WritesIntoFile() {
			call.Fail()
			return
		}
		c.rbuf = readBuffers(call, sess, c.rbuf)
	case mFreeBuffers:
		if sess == nil {
			call.Fail()
			return
		}
		sess.Disable()
		sess.Free()
		_ = call.Reply(&FreeBuffersResponse{}, false)
	case mFlush:
		if sess == nil {
			call.Fail()
			return
		}
		r := args.(*FlushRequest)
		timeout := time.Duration(r.GetTimeoutMs()) * time.Millisecond
		// The flush waits for producers: off the connection goroutine.
		go func() {
			if err := sess.Flush(timeout, r.GetFlags()); err != nil {
				call.Fail()
				return
			}
			_ = call.Reply(&FlushResponse{}, false)
		}()
	case mGetTraceStats:
		if sess == nil {
			call.Fail()
			return
		}
		// Computed on the session's goroutine: off the connection's.
		go func() {
			ts, err := sess.TraceStats()
			if err != nil {
				call.Fail()
				return
			}
			_ = call.Reply(&GetTraceStatsResponse{TraceStats: ts}, false)
		}()
	case mQueryServiceState:
		st := c.backend.QueryServiceState(c.conn.Peer(), args.(*QueryServiceStateRequest).GetSessionsOnly())
		queryServiceState(call, st)
	case mDetach:
		c.detach(call, args.(*DetachRequest).GetKey())
	case mAttach:
		c.attach(call, args.(*AttachRequest).GetKey())
	case mStartTracing:
		if sess == nil || sess.Start() != nil {
			call.Fail()
			return
		}
		_ = call.Reply(&StartTracingResponse{}, false)
		c.startObserving(sess) // a deferred session has nothing to observe before
	case mChangeTraceConfig:
		if sess == nil {
			call.Fail()
			return
		}
		if err := sess.ChangeTraceConfig(args.(*ChangeTraceConfigRequest).GetTraceConfig()); err != nil {
			// The reply has no error field: the reason goes to the log.
			c.conn.host.logf("perfettoipc: pid %d: %v", c.conn.Peer().PID, err)
			call.Fail()
			return
		}
		_ = call.Reply(&ChangeTraceConfigResponse{}, false)
	case mObserveEvents:
		c.observeEvents(call, args.(*ObserveEventsRequest))
	case mQueryCapabilities:
		_ = call.Reply(&QueryCapabilitiesResponse{Capabilities: Capabilities()}, false)
	case mCloneSession:
		c.cloneSession(call, args.(*CloneSessionRequest))
	default:
		// SaveTraceForBugreport: deprecated in traced too.
		call.Fail()
	}
}

// Capabilities is what tracepipe's consumer port serves, in traced's
// TracingServiceCapabilities: QueryCapabilities, the observable events
// ObserveEvents sends and CloneSession; not TraceConfig.output_path (a
// consumer passes the file descriptor instead).
func Capabilities() *TracingServiceCapabilities {
	return &TracingServiceCapabilities{
		HasQueryCapabilities: proto.Bool(true),
		ObservableEvents: []ObservableEvents_Type{
			ObservableEvents_TYPE_DATA_SOURCES_INSTANCES, ObservableEvents_TYPE_ALL_DATA_SOURCES_STARTED,
			ObservableEvents_TYPE_CLONE_TRIGGER_HIT,
		},
		HasTraceConfigOutputPath: proto.Bool(false),
		HasCloneSession:          proto.Bool(true),
	}
}

// observeEvents keeps call as the connection's event stream (replacing,
// and ending, an earlier one) and starts observing the session, if any.
// Types are the ObservableEvents.Type values; the mask is their OR as in
// traced (TYPE_ALL_DATA_SOURCES_STARTED = 2, so bit values, not shifts).
func (c *consumer) observeEvents(call *Call, r *ObserveEventsRequest) {
	var mask uint32
	for _, t := range r.GetEventsToObserve() {
		mask |= t
	}
	c.mu.Lock()
	old, stop := c.observe, c.stopObserve
	c.observe, c.observeMask, c.stopObserve = call, mask, nil
	sess := c.sess
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
	if old != nil {
		_ = old.Reply(&ObserveEventsResponse{}, false)
	}
	if mask == 0 {
		c.mu.Lock()
		c.observe = nil
		c.mu.Unlock()
		_ = call.Reply(&ObserveEventsResponse{}, false)
		return
	}
	if sess != nil {
		c.startObserving(sess)
	}
}

// startObserving connects the event stream, if any, to sess.
func (c *consumer) startObserving(sess ConsumerSession) {
	c.mu.Lock()
	call, mask := c.observe, c.observeMask
	c.mu.Unlock()
	if call == nil {
		return
	}
	// The session emits from its own goroutine, which must never wait for
	// this consumer: events are queued and sent from here; a consumer that
	// does not read loses the events beyond the queue (logged).
	events := make(chan obsItem, maxQueuedEvents)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case it := <-events:
				if it.mark != nil {
					close(it.mark)
					continue
				}
				_ = call.Reply(&ObserveEventsResponse{Events: it.ev}, true)
			case <-quit:
				return
			}
		}
	}()
	var quitOnce sync.Once
	end := func() { quitOnce.Do(func() { close(quit) }) }
	sessStop, err := sess.Observe(mask, func(ev *ObservableEvents) {
		select {
		case events <- obsItem{ev: ev}:
		default:
			c.conn.host.logf("perfettoipc: pid %d: ObserveEvents: the consumer does not read; an event is dropped", c.conn.Peer().PID)
		}
	})
	if err != nil {
		end()
		return // the session ended: nothing more to observe
	}
	stop := func() { sessStop(); end() }
	c.mu.Lock()
	if c.observe == call {
		c.stopObserve, stop = stop, c.stopObserve // a replaced observation ends
		c.observeQ, c.observeQuit = events, quit
	}
	c.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// cloneSession clones another session into this connection's (which
// must have none), as traced's CloneSession.
func (c *consumer) cloneSession(call *Call, r *CloneSessionRequest) {
	c.mu.Lock()
	busy := c.sess != nil
	c.mu.Unlock()
	if busy {
		_ = call.Reply(&CloneSessionResponse{Success: proto.Bool(false), Error: proto.String("this consumer already has a session")}, false)
		return
	}
	// Cloning flushes and copies the buffers: off the connection goroutine.
	go func() {
		sess, resp := c.backend.CloneSession(c.conn.Peer(), r)
		if sess != nil {
			c.mu.Lock()
			if c.sess == nil {
				c.sess = sess
			} else {
				sess.Free()
				sess = nil
				resp = &CloneSessionResponse{Success: proto.Bool(false), Error: proto.String("this consumer already has a session")}
			}
			c.mu.Unlock()
		}
		_ = call.Reply(resp, false)
	}()
}

// enable starts the session; EnableTracing's reply comes when it ends.
func (c *consumer) enable(call *Call, r *EnableTracingRequest, fd int) {
	c.mu.Lock()
	busy := c.sess != nil
	c.mu.Unlock()
	if r.GetAttachNotificationOnly() {
		// After Attach: only the end-of-session notification.
		if fd >= 0 {
			unix.Close(fd)
		}
		c.mu.Lock()
		sess := c.sess
		c.mu.Unlock()
		if sess == nil {
			call.Fail()
			return
		}
		c.waitEnd(call, sess)
		return
	}
	if busy || r.TraceConfig == nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		msg := "a session is already enabled on this connection"
		if !busy {
			msg = "EnableTracing without trace_config"
		}
		_ = call.Reply(&EnableTracingResponse{State: &EnableTracingResponse_Disabled{Disabled: true}, Error: proto.String(msg)}, false)
		return
	}
	sess, err := c.backend.EnableTracing(c.conn.Peer(), r.GetTraceConfig(), fd)
	if err != nil {
		_ = call.Reply(&EnableTracingResponse{State: &EnableTracingResponse_Disabled{Disabled: true}, Error: proto.String(err.Error())}, false)
		return
	}
	c.mu.Lock()
	c.sess = sess
	c.traceConfig = r.GetTraceConfig()
	c.mu.Unlock()
	c.startObserving(sess)
	c.waitEnd(call, sess)
}

// waitEnd answers call when sess ended, unless the consumer detached.
func (c *consumer) waitEnd(call *Call, sess ConsumerSession) {
	w := &enableWaiter{}
	c.mu.Lock()
	c.notify = w
	c.mu.Unlock()
	go func() {
		<-sess.Done()
		c.observeSent()
		resp := &EnableTracingResponse{State: &EnableTracingResponse_Disabled{Disabled: true}}
		if err := sess.Err(); err != nil {
			resp.Error = proto.String(err.Error())
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.detached {
			_ = call.Reply(resp, false)
		}
	}()
}

// detach hands the session over to the detached set under key: it runs
// on without this connection until an Attach with the same key and uid.
func (c *consumer) detach(call *Call, key string) {
	c.mu.Lock()
	sess, tc, w := c.sess, c.traceConfig, c.notify
	c.mu.Unlock()
	k := detachKey{uid: c.conn.Peer().UID, key: key}
	d := c.detached
	d.mu.Lock()
	_, taken := d.m[k]
	if sess == nil || key == "" || taken || len(d.m) >= maxDetached {
		d.mu.Unlock()
		call.Fail()
		return
	}
	d.m[k] = &detached{sess: sess, traceConfig: tc}
	d.mu.Unlock()
	c.mu.Lock()
	c.sess, c.traceConfig, c.notify = nil, nil, nil
	c.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		w.detached = true
		w.mu.Unlock()
	}
	// A detached session that ends is forgotten.
	go func() {
		<-sess.Done()
		d.mu.Lock()
		if e := d.m[k]; e != nil && e.sess == sess {
			delete(d.m, k)
		}
		d.mu.Unlock()
	}()
	_ = call.Reply(&DetachResponse{}, false)
}

// attach takes over the detached session key of the same uid and answers
// with its TraceConfig; an unknown key fails, as traced's does.
func (c *consumer) attach(call *Call, key string) {
	c.mu.Lock()
	busy := c.sess != nil
	c.mu.Unlock()
	k := detachKey{uid: c.conn.Peer().UID, key: key}
	d := c.detached
	d.mu.Lock()
	e := d.m[k]
	if e == nil || busy {
		d.mu.Unlock()
		call.Fail()
		return
	}
	delete(d.m, k)
	d.mu.Unlock()
	c.mu.Lock()
	c.sess, c.traceConfig = e.sess, e.traceConfig
	c.mu.Unlock()
	_ = call.Reply(&AttachResponse{TraceConfig: e.traceConfig}, false)
	c.startObserving(e.sess)
}

// readBuffers streams what the session read as slices, about 32 KiB of
// packet bytes per reply, has_more on all but the last. A packet larger
// than a reply is cut into slices across replies; the last slice of each
// packet says so. Slices carry no 0x0A preamble (the consumer adds it).
// Each reply is encoded into buf (reused: nothing is allocated per reply
// or slice once it has grown); it returns buf for the next call.
func readBuffers(call *Call, sess ConsumerSession, buf []byte) []byte {
	buf = buf[:0]
	size := 0
	for {
		pkts := sess.ReadPackets(readBuffersReplyBytes)
		if len(pkts) == 0 {
			break
		}
		for _, p := range pkts {
			for {
				room := readBuffersReplyBytes - size
				if room <= 0 {
					_ = call.ReplyRaw(buf, true)
					buf, size, room = buf[:0], 0, readBuffersReplyBytes
				}
				n := min(len(p), room)
				buf = appendSlice(buf, p[:n], n == len(p))
				size += n + 8 // a slice's own encoding overhead, roughly
				p = p[n:]
				if len(p) == 0 {
					break
				}
			}
		}
	}
	_ = call.ReplyRaw(buf, false)
	return buf
}

// serviceStateReplyBytes bounds one QueryServiceState reply; a larger
// state is streamed in parts (has_more), which Perfetto's client merges.
var serviceStateReplyBytes = 64 << 10

// queryServiceState sends st in one reply, or in parts that each stay
// under serviceStateReplyBytes: the scalar fields and producers first,
// then the data sources in batches.
func queryServiceState(call *Call, st *TracingServiceState) {
	if proto.Size(st) <= serviceStateReplyBytes {
		_ = call.Reply(&QueryServiceStateResponse{ServiceState: st}, false)
		return
	}
	sources := st.DataSources
	head := proto.Clone(st).(*TracingServiceState)
	head.DataSources = nil
	parts := []*TracingServiceState{head}
	part := &TracingServiceState{}
	size := 0
	for _, d := range sources {
		n := proto.Size(d) + 8
		if size+n > serviceStateReplyBytes && len(part.DataSources) > 0 {
			parts = append(parts, part)
			part, size = &TracingServiceState{}, 0
		}
		part.DataSources = append(part.DataSources, d)
		size += n
	}
	if len(part.DataSources) > 0 {
		parts = append(parts, part)
	}
	for i, p := range parts {
		_ = call.Reply(&QueryServiceStateResponse{ServiceState: p}, i < len(parts)-1)
	}
}
