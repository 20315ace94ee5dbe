// Package wire holds what the plugin host (plugins/host) and the plugin SDK
// (plugins/sdk) must agree on byte for byte: the go-plugin handshake, the
// name under which the data source plugin is dispensed, the hand-written
// gRPC service description and the Setup request.
//
// The service is defined without protoc: every message is a well-known
// protobuf type (wrapperspb, emptypb), so gRPC's default proto codec carries
// them and no generated code is needed. Methods:
//
//	Setup(BytesValue: JSON SetupRequest) → Empty
//	Commits(Empty) → stream BytesValue     one CommitDataRequest encoding each
//	Start(Empty) → Empty
//	Flush(UInt64Value: flush request id) → Empty
//	ClearIncrementalState(Empty) → Empty
//	Stop(Empty) → Empty
//
// This package must not contain behaviour: no goroutines, no SMB access, no
// trust decisions. Changing anything here is a protocol change and needs a
// new Handshake.ProtocolVersion.
package wire

import (
	"context"
	"encoding/json"
	"errors"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Handshake is the go-plugin handshake shared by host and SDK. The magic
// cookie only keeps a plugin binary from being run by hand by mistake; it is
// not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "TRACEPIPE_PLUGIN",
	MagicCookieValue: "d2a7c1f0-tracepipe-datasource-v1",
}

// PluginName is the name under which the data source plugin is dispensed.
const PluginName = "datasource"

// SMBFd is the descriptor number under which the child finds the SMB memfd
// (the first of exec.Cmd.ExtraFiles).
const SMBFd = 3

// ServiceName is the gRPC service name.
const ServiceName = "tracepipe.plugins.v1.DataSource"

// Full method names, as passed to grpc.ClientConn.Invoke and NewStream.
const (
	MethodSetup                 = "/" + ServiceName + "/Setup"
	MethodCommits               = "/" + ServiceName + "/Commits"
	MethodStart                 = "/" + ServiceName + "/Start"
	MethodFlush                 = "/" + ServiceName + "/Flush"
	MethodClearIncrementalState = "/" + ServiceName + "/ClearIncrementalState"
	MethodStop                  = "/" + ServiceName + "/Stop"
)

// SetupRequest is the Setup RPC's argument, JSON-encoded in a BytesValue.
type SetupRequest struct {
	// Name is the data source name the plugin must serve.
	Name string `json:"name"`
	// Config is the per-source config section as JSON (null when absent).
	Config json.RawMessage `json:"config"`
	// PageSize and SMBSize describe the SMB passed as fd SMBFd.
	PageSize uint32 `json:"page_size"`
	SMBSize  uint32 `json:"smb_size"`
	// TargetBuffer is the buffer id every writer of the plugin must use.
	TargetBuffer uint32 `json:"target_buffer"`
	// Policy is the smb.BufferExhaustedPolicy of the writers.
	Policy int `json:"policy"`
}

// Server is what the plugin side implements.
type Server interface {
	Setup(context.Context, *wrapperspb.BytesValue) (*emptypb.Empty, error)
	Start(context.Context, *emptypb.Empty) (*emptypb.Empty, error)
	Flush(context.Context, *wrapperspb.UInt64Value) (*emptypb.Empty, error)
	ClearIncrementalState(context.Context, *emptypb.Empty) (*emptypb.Empty, error)
	Stop(context.Context, *emptypb.Empty) (*emptypb.Empty, error)
	// Commits sends one BytesValue per CommitData until the data source is
	// stopped and every commit is sent (then it returns nil) or the stream
	// breaks.
	Commits(*emptypb.Empty, grpc.ServerStream) error
}

// unary builds the method description of a unary RPC taking a Req.
func unary[Req any, PReq interface{ *Req }](name string, call func(Server, context.Context, PReq) (*emptypb.Empty, error)) grpc.MethodDesc {
	full := "/" + ServiceName + "/" + name
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := PReq(new(Req))
			if err := dec(in); err != nil {
				return nil, err
			}
			if icpt == nil {
				return call(srv.(Server), ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: full}
			return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return call(srv.(Server), ctx, req.(PReq))
			})
		},
	}
}

// CommitsStream describes the server-streaming Commits RPC (for
// grpc.ClientConn.NewStream).
var CommitsStream = grpc.StreamDesc{
	StreamName: "Commits",
	Handler: func(srv any, stream grpc.ServerStream) error {
		in := new(emptypb.Empty)
		if err := stream.RecvMsg(in); err != nil {
			return err
		}
		return srv.(Server).Commits(in, stream)
	},
	ServerStreams: true,
}

// ServiceDesc is the hand-written gRPC service description.
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*Server)(nil),
	Methods: []grpc.MethodDesc{
		unary[wrapperspb.BytesValue]("Setup", Server.Setup),
		unary[emptypb.Empty]("Start", Server.Start),
		unary[wrapperspb.UInt64Value]("Flush", Server.Flush),
		unary[emptypb.Empty]("ClearIncrementalState", Server.ClearIncrementalState),
		unary[emptypb.Empty]("Stop", Server.Stop),
	},
	Streams:  []grpc.StreamDesc{CommitsStream},
	Metadata: "tracepipe/plugins/internal/wire",
}

// Plugin is the go-plugin plugin of both sides: the SDK sets Impl and
// serves; the host leaves Impl nil and gets the *grpc.ClientConn from
// Dispense.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Server
}

// GRPCServer registers Impl (plugin side).
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("wire: Plugin.Impl is nil")
	}
	s.RegisterService(&ServiceDesc, p.Impl)
	return nil
}

// GRPCClient returns the connection itself (host side): the host calls the
// methods by name with its own deadlines.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return c, nil
}
