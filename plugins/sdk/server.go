package sdk

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tracepipe/tracepipe/plugins"
	"github.com/tracepipe/tracepipe/plugins/internal/wire"
	"github.com/tracepipe/tracepipe/plugins/producer"
	"github.com/tracepipe/tracepipe/smb"
)

// commitQueueLen bounds the encoded commits waiting for the stream.
const commitQueueLen = 64

type state int

const (
	stateNew state = iota
	stateSetUp
	stateStarted
	stateStopped
)

// server is the plugin side of one connection: at most one data source
// instance per process. It implements wire.DataSourceServer.
type server struct {
	wire.UnimplementedDataSourceServer
	sources map[string]Source
	logger  hclog.Logger
	smbFd   int // wire.SMBFd (tests map another descriptor)

	// mu serialises the control RPCs and guards the fields below it.
	mu    sync.Mutex
	state state
	shm   *smb.SMB
	rt    *producer.Runtime // the same runtime in-process data sources run on

	// The commit path: OnCommit → queue → Commits stream.
	queue      chan *wire.PluginMessage
	done       <-chan struct{} // the data source's plugins.Finite channel (nil: never)
	stopped    chan struct{}   // closed after the last commit was queued
	streamMu   sync.Mutex
	streamOpen bool
	streamGone chan struct{} // closed when the Commits handler returned
}

func newServer(sources map[string]Source, logger hclog.Logger) *server {
	return &server{
		sources:    sources,
		logger:     logger,
		smbFd:      wire.SMBFd,
		queue:      make(chan *wire.PluginMessage, commitQueueLen),
		stopped:    make(chan struct{}),
		streamGone: make(chan struct{}),
	}
}

func (s *server) sortedNames() []string {
	names := make([]string, 0, len(s.sources))
	for n := range s.sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (s *server) names() string { return strings.Join(s.sortedNames(), ", ") }

// Describe lists the data sources this plugin serves.
func (s *server) Describe(context.Context, *wire.DescribeRequest) (*wire.DescribeResponse, error) {
	out := &wire.DescribeResponse{}
	for _, name := range s.sortedNames() {
		src := s.sources[name]
		info := &wire.DataSourceInfo{Name: name, Description: src.Description}
		for _, k := range src.ConfigKeys {
			info.ConfigKeys = append(info.ConfigKeys, &wire.ConfigKey{Name: k.Name, Type: k.Type, Description: k.Description, Default: k.Default})
		}
		out.DataSources = append(out.DataSources, info)
	}
	return out, nil
}

// Validate runs the data source's factory on the config and discards the
// instance (factories must not start anything).
func (s *server) Validate(_ context.Context, in *wire.ValidateRequest) (*wire.ValidateResponse, error) {
	src, ok := s.sources[in.GetName()]
	if !ok {
		return &wire.ValidateResponse{UnknownDataSource: true}, nil
	}
	_, problems := build(src, wire.ConfigMap(in.GetConfig()))
	return &wire.ValidateResponse{Problems: problems}, nil
}

// build runs a factory, turning its error (or panic) into config problems.
func build(src Source, config map[string]any) (ds plugins.DataSource, problems []*wire.ConfigProblem) {
	defer func() {
		if r := recover(); r != nil {
			ds, problems = nil, []*wire.ConfigProblem{{Message: fmt.Sprintf("the data source's factory panicked: %v", r)}}
		}
	}()
	ds, err := src.Factory(config)
	if err != nil {
		return nil, configProblems(err)
	}
	if ds == nil {
		return nil, []*wire.ConfigProblem{{Message: "the factory returned no data source"}}
	}
	return ds, nil
}

// configProblems turns a factory error into the wire's problems.
func configProblems(err error) []*wire.ConfigProblem {
	var out []*wire.ConfigProblem
	for _, q := range plugins.ConfigProblems(err) {
		out = append(out, &wire.ConfigProblem{Path: q.Path, Message: q.Message})
	}
	return out
}

// Setup builds the data source and maps the SMB.
func (s *server) Setup(_ context.Context, req *wire.SetupRequest) (*wire.SetupResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return nil, status.Error(codes.FailedPrecondition, "setup: already set up")
	}
	src, ok := s.sources[req.GetName()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown data source %q (this plugin serves: %s)", req.GetName(), s.names())
	}
	var policy smb.BufferExhaustedPolicy
	switch req.GetPolicy() {
	case wire.BufferExhaustedPolicy_BUFFER_EXHAUSTED_POLICY_DROP:
		policy = smb.Drop
	case wire.BufferExhaustedPolicy_BUFFER_EXHAUSTED_POLICY_STALL:
		policy = smb.Stall
	default:
		return nil, status.Errorf(codes.InvalidArgument, "setup: unknown buffer exhausted policy %d", req.GetPolicy())
	}
	ds, problems := build(src, wire.ConfigMap(req.GetConfig()))
	if len(problems) > 0 {
		return &wire.SetupResponse{Problems: problems}, nil
	}
	shm, err := smb.MapFD(s.smbFd, int(req.GetPageSize()))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "setup: mapping the SMB (fd %d): %v", s.smbFd, err)
	}
	if shm.Size() != int(req.GetSmbSize()) || shm.PageSize() != int(req.GetPageSize()) {
		size := shm.Size()
		_ = shm.Close()
		return nil, status.Errorf(codes.InvalidArgument, "setup: SMB on fd %d is %d bytes, host announced %d (page size %d)", s.smbFd, size, req.GetSmbSize(), req.GetPageSize())
	}
	rt, err := producer.New(producer.Config{SMB: shm, TargetBuffer: req.GetTargetBuffer(), Policy: policy, OnCommit: s.onCommit, OnTriggers: s.onTriggers}, ds)
	if err != nil {
		_ = shm.Close()
		return nil, status.Errorf(codes.Internal, "setup: %v", err)
	}
	s.shm, s.rt = shm, rt
	s.done = rt.Done()
	s.state = stateSetUp
	return &wire.SetupResponse{Finite: s.done != nil}, nil
}

// Start starts the data source on the producer runtime.
func (s *server) Start(context.Context, *wire.StartRequest) (*wire.StartResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateSetUp {
		return nil, status.Errorf(codes.FailedPrecondition, "start: %s", s.stateProblem())
	}
	s.state = stateStarted
	if err := s.rt.Start(); err != nil {
		return nil, status.Errorf(codes.Unknown, "start: %v", err)
	}
	return &wire.StartResponse{}, nil
}

// Flush flushes the data source, then acknowledges the flush request.
func (s *server) Flush(_ context.Context, in *wire.FlushRequest) (*wire.FlushResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarted && s.state != stateSetUp {
		// Set up but not started: nothing written yet, still acknowledged.
		return nil, status.Errorf(codes.FailedPrecondition, "flush: %s", s.stateProblem())
	}
	if err := s.rt.FlushWithFlags(in.GetFlushRequestId(), plugins.FlushFlags(in.GetFlags())); err != nil {
		return nil, status.Errorf(codes.Unknown, "flush: %v", err)
	}
	return &wire.FlushResponse{}, nil
}

// ClearIncrementalState forwards to the data source.
func (s *server) ClearIncrementalState(context.Context, *wire.ClearIncrementalStateRequest) (*wire.ClearIncrementalStateResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarted {
		return nil, status.Errorf(codes.FailedPrecondition, "clear incremental state: %s", s.stateProblem())
	}
	s.rt.ClearIncrementalState()
	return &wire.ClearIncrementalStateResponse{}, nil
}

// Stop stops the data source, closes its writers, sends the last commits
// and lets the Commits stream end. Stopping twice is a no-op.
func (s *server) Stop(context.Context, *wire.StopRequest) (*wire.StopResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return nil, status.Errorf(codes.Unknown, "stop: %v", err)
	}
	return &wire.StopResponse{}, nil
}

func (s *server) stopLocked() error {
	if s.state == stateStopped {
		return nil
	}
	var err error
	if s.rt != nil {
		err = s.rt.Stop()
	}
	s.state = stateStopped
	close(s.stopped)
	return err
}

// abandon stops the data source when the host went away without Stop.
// The SMB stays mapped: the process is about to exit.
func (s *server) abandon() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.stopLocked(); err != nil {
			s.logger.Warn("stopping the data source after the host left", "error", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(producer.StallTimeout):
		s.logger.Warn("data source did not stop in time after the host left", "timeout", producer.StallTimeout)
	}
}

func (s *server) stateProblem() string {
	switch s.state {
	case stateNew:
		return "not set up"
	case stateSetUp:
		return "not started"
	case stateStarted:
		return "already started"
	default:
		return "already stopped"
	}
}

// onCommit is the runtime's OnCommit: it encodes cd (the runtime reuses
// it) and queues the bytes for the stream. It blocks only while the queue
// is full and the stream is alive; once the stream is gone, commits are
// dropped (nobody could read the chunks anyway).
func (s *server) onCommit(cd *smb.CommitData) {
	m := &wire.PluginMessage{Kind: &wire.PluginMessage_CommitData{CommitData: cd.AppendMarshal(make([]byte, 0, 64))}}
	select {
	case s.queue <- m:
	case <-s.streamGone:
	}
}

// onTriggers is the runtime's OnTriggers: the names go on the stream,
// in order with the commits; dropped once the stream is gone.
func (s *server) onTriggers(names []string) {
	m := &wire.PluginMessage{Kind: &wire.PluginMessage_ActivateTriggers{ActivateTriggers: &wire.ActivateTriggers{TriggerNames: names}}}
	select {
	case s.queue <- m:
	case <-s.streamGone:
	}
}

// Commits sends the queued commits, and DataSourceDone once a Finite data
// source is done, until Stop queued the last commit.
func (s *server) Commits(_ *wire.CommitsRequest, stream grpc.ServerStreamingServer[wire.PluginMessage]) error {
	s.streamMu.Lock()
	if s.streamOpen {
		s.streamMu.Unlock()
		return status.Error(codes.AlreadyExists, "commits: the commit stream is already open")
	}
	s.streamOpen = true
	s.streamMu.Unlock()
	defer close(s.streamGone)

	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	ctx := stream.Context()
	for {
		select {
		case m := <-s.queue:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-done:
			done = nil
			// Commits queued before Done closed go first.
			if err := s.sendQueued(stream); err != nil {
				return err
			}
			if err := stream.Send(doneMessage()); err != nil {
				return err
			}
		case <-s.stopped:
			// Stop queued its last commit before closing stopped, and no
			// writer or ticker runs any more: drain and end the stream.
			if err := s.sendQueued(stream); err != nil {
				return err
			}
			// A source that was done before Stop says so even when select
			// picked stopped first.
			if done != nil {
				select {
				case <-done:
					return stream.Send(doneMessage())
				default:
				}
			}
			return nil
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

func doneMessage() *wire.PluginMessage {
	return &wire.PluginMessage{Kind: &wire.PluginMessage_Done{Done: &wire.DataSourceDone{}}}
}

// sendQueued sends what is queued now.
func (s *server) sendQueued(stream grpc.ServerStreamingServer[wire.PluginMessage]) error {
	for {
		select {
		case m := <-s.queue:
			if err := stream.Send(m); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}
