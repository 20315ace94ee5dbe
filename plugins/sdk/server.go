package sdk

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
// instance per process.
type server struct {
	factories map[string]plugins.Factory
	logger    hclog.Logger
	smbFd     int // wire.SMBFd (tests map another descriptor)

	// mu serialises the control RPCs and guards the fields below it.
	mu    sync.Mutex
	state state
	shm   *smb.SMB
	rt    *producer.Runtime // the same runtime in-process data sources run on

	// The commit path: OnCommit → queue → Commits stream.
	queue      chan []byte
	stopped    chan struct{} // closed after the last commit was queued
	streamMu   sync.Mutex
	streamOpen bool
	streamGone chan struct{} // closed when the Commits handler returned
}

func newServer(factories map[string]plugins.Factory, logger hclog.Logger) *server {
	return &server{
		factories:  factories,
		logger:     logger,
		smbFd:      wire.SMBFd,
		queue:      make(chan []byte, commitQueueLen),
		stopped:    make(chan struct{}),
		streamGone: make(chan struct{}),
	}
}

func (s *server) names() string {
	names := make([]string, 0, len(s.factories))
	for n := range s.factories {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// Setup builds the data source and maps the SMB.
func (s *server) Setup(_ context.Context, in *wrapperspb.BytesValue) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateNew {
		return nil, status.Error(codes.FailedPrecondition, "setup: already set up")
	}
	var req wire.SetupRequest
	if err := json.Unmarshal(in.GetValue(), &req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "setup: bad request: %v", err)
	}
	factory, ok := s.factories[req.Name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "unknown data source %q (this plugin serves: %s)", req.Name, s.names())
	}
	policy := smb.BufferExhaustedPolicy(req.Policy)
	if policy != smb.Drop && policy != smb.Stall {
		return nil, status.Errorf(codes.InvalidArgument, "setup: unknown buffer exhausted policy %d", req.Policy)
	}
	var config map[string]any
	if len(req.Config) > 0 {
		if err := json.Unmarshal(req.Config, &config); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "data source %q: config is not a JSON object: %v", req.Name, err)
		}
	}
	ds, err := factory(config)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "data source %q: %v", req.Name, err)
	}
	if ds == nil {
		return nil, status.Errorf(codes.Internal, "data source %q: factory returned no data source", req.Name)
	}
	shm, err := smb.MapFD(s.smbFd, int(req.PageSize))
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "setup: mapping the SMB (fd %d): %v", s.smbFd, err)
	}
	if shm.Size() != int(req.SMBSize) || shm.PageSize() != int(req.PageSize) {
		size := shm.Size()
		_ = shm.Close()
		return nil, status.Errorf(codes.InvalidArgument, "setup: SMB on fd %d is %d bytes, host announced %d (page size %d)", s.smbFd, size, req.SMBSize, req.PageSize)
	}
	rt, err := producer.New(producer.Config{SMB: shm, TargetBuffer: req.TargetBuffer, Policy: policy, OnCommit: s.onCommit}, ds)
	if err != nil {
		_ = shm.Close()
		return nil, status.Errorf(codes.Internal, "setup: %v", err)
	}
	s.shm, s.rt = shm, rt
	s.state = stateSetUp
	return &emptypb.Empty{}, nil
}

// Start starts the data source and the commit flush ticker.
func (s *server) Start(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateSetUp {
		return nil, status.Errorf(codes.FailedPrecondition, "start: %s", s.stateProblem())
	}
	s.state = stateStarted
	if err := s.rt.Start(); err != nil {
		return nil, status.Errorf(codes.Unknown, "start: %v", err)
	}
	return &emptypb.Empty{}, nil
}

// Flush flushes the data source, then acknowledges the flush request.
func (s *server) Flush(_ context.Context, in *wrapperspb.UInt64Value) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarted && s.state != stateSetUp {
		// Set up but not started: nothing written yet, still acknowledged.
		return nil, status.Errorf(codes.FailedPrecondition, "flush: %s", s.stateProblem())
	}
	if err := s.rt.Flush(in.GetValue()); err != nil {
		return nil, status.Errorf(codes.Unknown, "flush: %v", err)
	}
	return &emptypb.Empty{}, nil
}

// ClearIncrementalState forwards to the data source.
func (s *server) ClearIncrementalState(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != stateStarted {
		return nil, status.Errorf(codes.FailedPrecondition, "clear incremental state: %s", s.stateProblem())
	}
	s.rt.ClearIncrementalState()
	return &emptypb.Empty{}, nil
}

// Stop stops the data source, closes its writers, sends the last commits
// and lets the Commits stream end. Stopping twice is a no-op.
func (s *server) Stop(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return nil, status.Errorf(codes.Unknown, "stop: %v", err)
	}
	return &emptypb.Empty{}, nil
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
	case <-time.After(5 * time.Second):
		s.logger.Warn("data source did not stop within 5s after the host left")
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

// onCommit is the arbiter's OnCommit: it encodes cd (the arbiter reuses
// it) and queues the bytes for the stream. It blocks only while the queue
// is full and the stream is alive; once the stream is gone, commits are
// dropped (nobody could read the chunks anyway).
func (s *server) onCommit(cd *smb.CommitData) {
	b := cd.AppendMarshal(make([]byte, 0, 64))
	select {
	case s.queue <- b:
	case <-s.streamGone:
	}
}

// Commits sends the queued commits until Stop queued the last one.
func (s *server) Commits(_ *emptypb.Empty, stream grpc.ServerStream) error {
	s.streamMu.Lock()
	if s.streamOpen {
		s.streamMu.Unlock()
		return status.Error(codes.AlreadyExists, "commits: the commit stream is already open")
	}
	s.streamOpen = true
	s.streamMu.Unlock()
	defer close(s.streamGone)

	ctx := stream.Context()
	send := func(b []byte) error { return stream.SendMsg(&wrapperspb.BytesValue{Value: b}) }
	for {
		select {
		case b := <-s.queue:
			if err := send(b); err != nil {
				return err
			}
		case <-s.stopped:
			// Stop queued its last commit before closing stopped, and no
			// writer or ticker runs any more: drain and end the stream.
			for {
				select {
				case b := <-s.queue:
					if err := send(b); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}
