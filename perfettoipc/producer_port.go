package perfettoipc

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/tracepipe/tracepipe/smb"
)

// ProducerPortMethods is ProducerPort's method table in Perfetto's
// declaration order (method id = position + 1).
var ProducerPortMethods = []string{
	"InitializeConnection", "RegisterDataSource", "UnregisterDataSource", "CommitData",
	"GetAsyncCommand", "RegisterTraceWriter", "UnregisterTraceWriter",
	"NotifyDataSourceStarted", "NotifyDataSourceStopped", "ActivateTriggers", "Sync",
	"UpdateDataSource",
}

// ProducerPort method ids.
const (
	mInitializeConnection uint32 = iota + 1
	mRegisterDataSource
	mUnregisterDataSource
	mCommitData
	mGetAsyncCommand
	mRegisterTraceWriter
	mUnregisterTraceWriter
	mNotifyDataSourceStarted
	mNotifyDataSourceStopped
	mActivateTriggers
	mSync
	mUpdateDataSource
)

// SMB geometry the port accepts or allocates (Perfetto's limits: pages of
// 4..64 KiB, SMBs up to 32 MiB; 256 KiB of 4 KiB pages without hints).
const (
	DefaultSMBSize      = 256 << 10
	DefaultSMBPageSize  = 4 << 10
	MaxSMBSize          = 32 << 20
	maxDataSources      = 1024 // registered per producer
	maxRegisteredWriter = 1024
	maxPendingCmds      = 256 // commands held until GetAsyncCommand
)

// Backend is the tracing service behind the producer port. Its methods
// run on the producer's connection goroutine, one at a time per producer,
// and must not block for long. Everything they get is untrusted. After
// Disconnected returns the producer's SMB is unmapped: the backend must
// have stopped reading it.
type Backend interface {
	// Connected: a producer initialised its connection.
	Connected(p *Producer)
	// Disconnected: the connection ended (after Connected).
	Disconnected(p *Producer)
	DataSourceRegistered(p *Producer, d *DataSourceDescriptor)
	DataSourceUnregistered(p *Producer, name string)
	// Commit hands over one CommitDataRequest encoding and the port's
	// decoding of it (smb.CommitData, validated; it may carry a
	// flush_request_id acknowledging a flush). Both are only valid during
	// the call.
	Commit(p *Producer, commitData []byte, decoded *smb.CommitData)
	DataSourceStarted(p *Producer, instanceID uint64)
	DataSourceStopped(p *Producer, instanceID uint64)
}

// TriggerBackend is implemented by a Backend that acts on the triggers
// producers activate (ActivateTriggers; `perfetto --trigger NAME`
// connects as a producer to send one). Without it they are accepted and
// ignored. Same rules as Backend's methods; names are untrusted.
type TriggerBackend interface {
	ActivateTriggers(p *Producer, names []string)
}

// maxTriggersPerCall bounds the names one ActivateTriggers passes on.
const maxTriggersPerCall = 64

// NewProducerPort returns the ProducerPort service for a Host.
func NewProducerPort(b Backend) *Service {
	return &Service{Name: "ProducerPort", Methods: ProducerPortMethods, Open: func(c *Conn) Handler {
		return &Producer{conn: c, backend: b}
	}, Transient: producerTransient, InitMethod: "InitializeConnection"}
}

// producerTransient names the methods answered at once, whose Call the
// host may reuse: all but InitializeConnection, the registrations and
// GetAsyncCommand (whose Call is the command stream).
func producerTransient(method uint32) bool {
	switch method {
	case mCommitData, mRegisterTraceWriter, mUnregisterTraceWriter, mNotifyDataSourceStarted,
		mNotifyDataSourceStopped, mActivateTriggers, mSync:
		return true
	}
	return false
}

// Producer is one connected Perfetto producer, seen from the service. The
// service drives its data sources with the Setup/Start/Stop/Flush/Clear
// methods (any goroutine); they travel on the GetAsyncCommand stream.
type Producer struct {
	conn    *Conn
	backend Backend

	// Connection goroutine only.
	initialized bool
	name        string
	sdkVersion  string
	dataSources map[string]*DataSourceDescriptor
	cd          smb.CommitData // validates CommitData without allocating

	mu         sync.Mutex
	writers    map[uint32]uint32 // writer id → target buffer (written on the connection goroutine)
	smb        *smb.SMB
	provided   bool // the producer supplied the SMB
	smbSent    bool // setup_tracing went out
	gac        *Call
	pending    []pendingCmd // commands not sent yet, in order
	closed     bool
	pageSizeKB uint32
	// The command writer: a goroutine started with the command stream
	// sends pending commands in order, so that the service's calls
	// (StartDataSource, Flush, …) never wait on the producer's socket.
	kick       chan struct{} // buffered(1): pending grew
	writerDone chan struct{} // closed when the writer returned (nil: none)
}

type pendingCmd struct {
	cmd *GetAsyncCommandResponse
	fd  int
}

// Name is the producer_name the producer gave (untrusted).
func (p *Producer) Name() string { return p.name }

// SDKVersion is the sdk_version the producer gave (untrusted).
func (p *Producer) SDKVersion() string { return p.sdkVersion }

// Peer is the producer's identity from the socket.
func (p *Producer) Peer() Peer { return p.conn.Peer() }

// SMB is the producer's shared memory buffer: the one it supplied, or the
// one the port allocated; nil until InitializeConnection. It is this
// producer's alone.
func (p *Producer) SMB() *smb.SMB {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.smb
}

// DataSources lists the registered data source descriptors.
func (p *Producer) DataSources() []*DataSourceDescriptor {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*DataSourceDescriptor, 0, len(p.dataSources))
	for _, d := range p.dataSources {
		out = append(out, d)
	}
	return out
}

// Disconnect closes the producer's connection.
func (p *Producer) Disconnect() { p.conn.Close() }

// Handler: connection goroutine.

func (p *Producer) Close() {
	p.mu.Lock()
	p.closed = true
	for _, c := range p.pending {
		if c.fd >= 0 {
			unix.Close(c.fd)
		}
	}
	p.pending = nil
	wasInit := p.initialized
	writerDone := p.writerDone
	if p.kick != nil {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	if writerDone != nil {
		<-writerDone // the connection is closed: its last send fails at once
	}
	if wasInit {
		p.backend.Disconnected(p)
	}
	p.mu.Lock()
	if p.smb != nil {
		_ = p.smb.Close()
	}
	p.mu.Unlock()
}

// errNotInitialized rejects calls before InitializeConnection.
var errNotInitialized = errors.New("connection not initialized")

// DecodeProducerArgs decodes a ProducerPort method's arguments (untrusted
// bytes). CommitData is decoded with smb.CommitData, the decoder plugins'
// commits go through.
func DecodeProducerArgs(method uint32, b []byte) (proto.Message, error) {
	var m proto.Message
	switch method {
	case mInitializeConnection:
		m = &InitializeConnectionRequest{}
	case mRegisterDataSource:
		m = &RegisterDataSourceRequest{}
	case mUnregisterDataSource:
		m = &UnregisterDataSourceRequest{}
	case mCommitData:
		var cd smb.CommitData
		if err := cd.Unmarshal(b); err != nil {
			return nil, err
		}
		return nil, nil
	case mGetAsyncCommand:
		m = &GetAsyncCommandRequest{}
	case mRegisterTraceWriter:
		m = &RegisterTraceWriterRequest{}
	case mUnregisterTraceWriter:
		m = &UnregisterTraceWriterRequest{}
	case mNotifyDataSourceStarted:
		m = &NotifyDataSourceStartedRequest{}
	case mNotifyDataSourceStopped:
		m = &NotifyDataSourceStoppedRequest{}
	case mActivateTriggers:
		m = &ActivateTriggersRequest{}
	case mSync:
		m = &SyncRequest{}
	case mUpdateDataSource:
		m = &UpdateDataSourceRequest{}
	default:
		return nil, fmt.Errorf("ProducerPort: no method %d", method)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("ProducerPort.%s: %w", ProducerPortMethods[method-1], err)
	}
	return m, nil
}

func (p *Producer) Invoke(method uint32, call *Call) {
	fd := call.TakeFD()
	if fd >= 0 && method != mInitializeConnection {
		unix.Close(fd) // only InitializeConnection may carry a descriptor
		fd = -1
	}
	var args proto.Message
	var err error
	if method == mCommitData { // the hot path: validated in place, nothing allocated
		err = p.cd.Unmarshal(call.Args)
	} else {
		args, err = DecodeProducerArgs(method, call.Args)
	}
	if err != nil || (!p.initialized && method != mInitializeConnection) {
		if fd >= 0 {
			unix.Close(fd)
		}
		call.Fail()
		return
	}
	switch method {
	case mInitializeConnection:
		p.initialize(call, args.(*InitializeConnectionRequest), fd)
	case mRegisterDataSource:
		d := args.(*RegisterDataSourceRequest).GetDataSourceDescriptor()
		if d.GetName() == "" {
			_ = call.Reply(&RegisterDataSourceResponse{Error: proto.String("data source name is empty")}, false)
			return
		}
		if _, dup := p.dataSources[d.GetName()]; !dup && len(p.dataSources) >= maxDataSources {
			_ = call.Reply(&RegisterDataSourceResponse{Error: proto.String("too many data sources")}, false)
			return
		}
		p.mu.Lock()
		p.dataSources[d.GetName()] = d
		p.mu.Unlock()
		p.backend.DataSourceRegistered(p, d)
		_ = call.Reply(&RegisterDataSourceResponse{}, false)
	case mUpdateDataSource:
		d := args.(*UpdateDataSourceRequest).GetDataSourceDescriptor()
		old, ok := p.dataSources[d.GetName()]
		if !ok || d.GetId() == 0 || old.GetId() != d.GetId() {
			call.Fail()
			return
		}
		p.mu.Lock()
		p.dataSources[d.GetName()] = d
		p.mu.Unlock()
		p.backend.DataSourceRegistered(p, d)
		_ = call.Reply(&UpdateDataSourceResponse{}, false)
	case mUnregisterDataSource:
		name := args.(*UnregisterDataSourceRequest).GetDataSourceName()
		if _, ok := p.dataSources[name]; ok {
			p.mu.Lock()
			delete(p.dataSources, name)
			p.mu.Unlock()
			p.backend.DataSourceUnregistered(p, name)
		}
		_ = call.Reply(&UnregisterDataSourceResponse{}, false)
	case mCommitData:
		p.backend.Commit(p, call.Args, &p.cd)
		_ = call.ReplyRaw(nil, false) // CommitDataResponse{}, without allocating it
	case mGetAsyncCommand:
		p.mu.Lock()
		if p.gac != nil {
			p.mu.Unlock()
			call.Fail() // one command stream per producer
			return
		}
		p.gac = call
		p.kick = make(chan struct{}, 1)
		p.writerDone = make(chan struct{})
		if len(p.pending) > 0 {
			p.kick <- struct{}{}
		}
		p.mu.Unlock()
		go p.writeCmds()
	case mRegisterTraceWriter:
		r := args.(*RegisterTraceWriterRequest)
		p.mu.Lock()
		if len(p.writers) < maxRegisteredWriter {
			p.writers[r.GetTraceWriterId()] = r.GetTargetBuffer()
		}
		p.mu.Unlock()
		_ = call.Reply(&RegisterTraceWriterResponse{}, false)
	case mUnregisterTraceWriter:
		p.mu.Lock()
		delete(p.writers, args.(*UnregisterTraceWriterRequest).GetTraceWriterId())
		p.mu.Unlock()
		_ = call.Reply(&UnregisterTraceWriterResponse{}, false)
	case mNotifyDataSourceStarted:
		p.backend.DataSourceStarted(p, args.(*NotifyDataSourceStartedRequest).GetDataSourceId())
		_ = call.Reply(&NotifyDataSourceStartedResponse{}, false)
	case mNotifyDataSourceStopped:
		p.backend.DataSourceStopped(p, args.(*NotifyDataSourceStoppedRequest).GetDataSourceId())
		_ = call.Reply(&NotifyDataSourceStoppedResponse{}, false)
	case mActivateTriggers:
		if tb, ok := p.backend.(TriggerBackend); ok {
			names := args.(*ActivateTriggersRequest).GetTriggerNames()
			tb.ActivateTriggers(p, names[:min(len(names), maxTriggersPerCall)])
		}
		_ = call.Reply(&ActivateTriggersResponse{}, false)
	case mSync:
		// Requests are handled in order on this goroutine, so everything
		// sent before Sync is done.
		_ = call.Reply(&SyncResponse{}, false)
	}
}

// initialize handles InitializeConnection: a producer-provided SMB (a
// sealed memfd riding on the frame) is mapped; otherwise the port will
// allocate a sealed memfd when the first data source is set up.
func (p *Producer) initialize(call *Call, r *InitializeConnectionRequest, fd int) {
	if p.initialized {
		if fd >= 0 {
			unix.Close(fd)
		}
		call.Fail()
		return
	}
	p.initialized = true
	p.name = r.GetProducerName()
	p.sdkVersion = r.GetSdkVersion()
	p.dataSources = map[string]*DataSourceDescriptor{}
	p.mu.Lock()
	p.writers = map[uint32]uint32{}
	p.mu.Unlock()
	size, page := smbGeometry(r.GetSharedMemorySizeHintBytes(), r.GetSharedMemoryPageSizeHintBytes())
	resp := &InitializeConnectionResponse{
		UsingShmemProvidedByProducer: proto.Bool(false),
		DirectSmbPatchingSupported:   proto.Bool(true),
		UseShmemEmulation:            proto.Bool(false),
	}
	var err error
	var s *smb.SMB
	if r.GetProducerProvidedShmem() && fd >= 0 {
		// The producer's memfd: MapFD insists on the shrink seal, so the
		// producer cannot truncate it under us; its size comes from fstat.
		s, err = smb.MapFD(fd, page)
		if err == nil && s.Size() > MaxSMBSize {
			_ = s.Close()
			err = fmt.Errorf("%d bytes exceed %d", s.Size(), MaxSMBSize)
		}
		if err != nil {
			unix.Close(fd)
			call.conn.host.logf("perfettoipc: producer %q (pid %d): own SMB refused (%v); using a service SMB", p.name, p.Peer().PID, err)
			s = nil
		} else {
			resp.UsingShmemProvidedByProducer = proto.Bool(true)
		}
	} else if fd >= 0 {
		unix.Close(fd)
	}
	if s == nil {
		s, err = smb.NewMemfdSMB("perfetto_shmem", size, page)
		if err != nil {
			p.initialized = false
			call.Fail()
			return
		}
	}
	p.mu.Lock()
	p.smb = s
	p.pageSizeKB = uint32(s.PageSize() / 1024)
	p.provided = resp.GetUsingShmemProvidedByProducer()
	p.mu.Unlock()
	// The service knows the producer before the producer goes on.
	p.backend.Connected(p)
	_ = call.Reply(resp, false)
	if p.provided {
		// traced confirms a producer SMB with an empty setup_tracing at once.
		p.mu.Lock()
		p.smbSent = true
		p.mu.Unlock()
		p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_SetupTracing_{SetupTracing: &GetAsyncCommandResponse_SetupTracing{}}}, -1)
	}
}

// smbGeometry turns the producer's hints into a size and page size the SMB
// ABI accepts, bounded by MaxSMBSize.
func smbGeometry(sizeHint, pageHint uint32) (size, page int) {
	page, size = DefaultSMBPageSize, DefaultSMBSize
	if pageHint >= smb.MinPageSize && pageHint <= smb.MaxPageSize && pageHint%smb.MinPageSize == 0 {
		page = int(pageHint)
	}
	if sizeHint > 0 && sizeHint <= MaxSMBSize {
		size = int(sizeHint)
	}
	size = size / page * page
	if size < page {
		size = page
	}
	return size, page
}

// queueCmd queues a command for the GetAsyncCommand stream; the command
// writer sends it once the producer opened the stream, after every
// command queued before it. It never waits on the socket. fd (if >= 0)
// is closed after sending.
func (p *Producer) queueCmd(cmd *GetAsyncCommandResponse, fd int) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		if fd >= 0 {
			unix.Close(fd)
		}
		return
	}
	if len(p.pending) >= maxPendingCmds {
		// A producer that never opens its command stream, or does not
		// read it, cannot make the service hold commands without bound.
		p.mu.Unlock()
		if fd >= 0 {
			unix.Close(fd)
		}
		p.conn.host.logf("perfettoipc: producer %q (pid %d): %d commands unsent; disconnecting", p.name, p.Peer().PID, maxPendingCmds)
		p.conn.Close()
		return
	}
	p.pending = append(p.pending, pendingCmd{cmd, fd})
	if p.kick != nil {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
}

// writeCmds is the command writer: it sends the pending commands in
// order until the connection closes (each send bounded by the host's
// WriteTimeout, after which the connection fails).
func (p *Producer) writeCmds() {
	defer close(p.writerDone)
	for range p.kick {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		batch := p.pending
		p.pending = nil
		p.mu.Unlock()
		for _, c := range batch {
			p.sendCmd(c.cmd, c.fd)
		}
	}
}

func (p *Producer) sendCmd(cmd *GetAsyncCommandResponse, fd int) {
	_ = p.gac.ReplyFD(cmd, true, fd)
	if fd >= 0 {
		unix.Close(fd)
	}
}

// WriterTarget is the target buffer the producer registered trace writer
// id for (RegisterTraceWriter; untrusted), and whether it did.
func (p *Producer) WriterTarget(id uint16) (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.writers[uint32(id)]
	return t, ok
}

// SetupDataSource sets up data source instance id with cfg (whose name
// and target_buffer the caller set): the first time, the SMB goes out
// with setup_tracing. traced sets up every instance of a session before
// it starts any (StartDataSource).
func (p *Producer) SetupDataSource(id uint64, cfg *DataSourceConfig) error {
	p.mu.Lock()
	if p.closed || p.smb == nil {
		p.mu.Unlock()
		return errors.New("perfettoipc: producer not connected")
	}
	sendSMB := !p.smbSent
	p.smbSent = true
	s, pageKB := p.smb, p.pageSizeKB
	p.mu.Unlock()
	if sendSMB {
		fd, err := unix.FcntlInt(uintptr(s.Fd()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("perfettoipc: duplicating the SMB descriptor: %w", err)
		}
		p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_SetupTracing_{SetupTracing: &GetAsyncCommandResponse_SetupTracing{
			SharedBufferPageSizeKb: proto.Uint32(pageKB)}}}, fd)
	}
	p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_SetupDataSource_{SetupDataSource: &GetAsyncCommandResponse_SetupDataSource{
		NewInstanceId: proto.Uint64(id), Config: cfg}}}, -1)
	return nil
}

// StartDataSource starts data source instance id, set up before with the
// same cfg.
func (p *Producer) StartDataSource(id uint64, cfg *DataSourceConfig) {
	p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_StartDataSource_{StartDataSource: &GetAsyncCommandResponse_StartDataSource{
		NewInstanceId: proto.Uint64(id), Config: cfg}}}, -1)
}

// StopDataSource asks the producer to stop instance id; it answers with
// NotifyDataSourceStopped if its descriptor says will_notify_on_stop.
func (p *Producer) StopDataSource(id uint64) {
	p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_StopDataSource_{StopDataSource: &GetAsyncCommandResponse_StopDataSource{
		InstanceId: proto.Uint64(id)}}}, -1)
}

// Flush asks the producer to commit what instances ids wrote; it answers
// with a CommitData carrying requestID.
func (p *Producer) Flush(ids []uint64, requestID, flags uint64) {
	p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_Flush_{Flush: &GetAsyncCommandResponse_Flush{
		DataSourceIds: ids, RequestId: proto.Uint64(requestID), Flags: proto.Uint64(flags)}}}, -1)
}

// ClearIncrementalState asks the producer to reset instances ids'
// incremental state.
func (p *Producer) ClearIncrementalState(ids []uint64) {
	p.queueCmd(&GetAsyncCommandResponse{Cmd: &GetAsyncCommandResponse_ClearIncrementalState_{ClearIncrementalState: &GetAsyncCommandResponse_ClearIncrementalState{
		DataSourceIds: ids}}}, -1)
}
