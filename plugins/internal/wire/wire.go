// Package wire holds what the plugin host (plugins/host) and the plugin SDK
// (plugins/sdk) must agree on byte for byte: the go-plugin handshake, the
// name under which the data source plugin is dispensed, and the gRPC
// protocol, defined in datasource.proto (package tracepipe.plugins.v2) with
// the code protoc generates from it (datasource.pb.go,
// datasource_grpc.pb.go; `go generate` regenerates them).
//
// This package must not contain behaviour: no goroutines, no SMB access, no
// trust decisions. Changing datasource.proto incompatibly is a protocol
// change and needs a new Handshake.ProtocolVersion.
package wire

import (
	"context"
	"errors"
	"fmt"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Handshake is the go-plugin handshake shared by host and SDK. The magic
// cookie only keeps a plugin binary from being run by hand by mistake; it is
// not a security measure. ProtocolVersion 2 is datasource.proto's
// tracepipe.plugins.v2 (1 was a hand-written service with JSON setup).
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  2,
	MagicCookieKey:   "TRACEPIPE_PLUGIN",
	MagicCookieValue: "d2a7c1f0-tracepipe-datasource-v1",
}

// PluginName is the name under which the data source plugin is dispensed.
const PluginName = "datasource"

// SMBFd is the descriptor number under which the child finds the SMB memfd
// (the first of exec.Cmd.ExtraFiles).
const SMBFd = 3

// Plugin is the go-plugin plugin of both sides: the SDK sets Impl and
// serves; the host leaves Impl nil and gets a DataSourceClient from
// Dispense.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl DataSourceServer
}

// GRPCServer registers Impl (plugin side).
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("wire: Plugin.Impl is nil")
	}
	RegisterDataSourceServer(s, p.Impl)
	return nil
}

// GRPCClient returns the typed client (host side).
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewDataSourceClient(c), nil
}

// ConfigStruct encodes a data source's config section for the wire.
// Values must be what a config file decodes to: nil, bool, numbers,
// strings, lists and string-keyed maps.
func ConfigStruct(config map[string]any) (*structpb.Struct, error) {
	if config == nil {
		return nil, nil
	}
	s, err := structpb.NewStruct(normalize(config).(map[string]any))
	if err != nil {
		return nil, fmt.Errorf("config cannot be sent to the plugin: %w", err)
	}
	return s, nil
}

// ConfigMap decodes a config section from the wire (numbers arrive as
// float64, as from JSON); nil stays nil.
func ConfigMap(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}

// normalize turns the shapes config decoders produce ([]string,
// map[any]any...) into the ones structpb accepts.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case fmt.Stringer:
		return x.String()
	default:
		return v
	}
}
