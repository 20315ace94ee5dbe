// Package perfettoipc speaks Perfetto's IPC protocol on UNIX sockets, so
// programs built for Perfetto's traced (SDK apps, traced_probes, the
// perfetto command) can talk to tracepipe unchanged.
//
// It owns the wire: the frame format ([u32 LE length][Frame], at most
// MaxFrameSize bytes), BindService / InvokeMethod with request ids and
// streaming replies, SCM_RIGHTS descriptor passing and the peer identity
// from SO_PEERCRED. Services (ProducerPort, ConsumerPort) are plugged into
// a Host as method tables; what a method does is theirs. Client is the
// consumer side, for tracepipe's own commands. The hot path (CommitData
// frames in, ReadBuffers replies out) is read and written in place,
// without allocating per frame.
//
// It also holds tracepipe's schema of Perfetto's trace configuration
// (perfetto_config.proto: TraceConfig, DataSourceConfig and the data-source
// configs tracepipe models; the others as bytes), against which pipeline
// parses text configs and YAML perfetto_config sections; what the fields
// mean is the pipeline's business, not this package's.
//
// Everything a peer sends is untrusted: frames are bounded, malformed
// frames are dropped or end the connection, arguments that fail to decode
// are answered with a failed reply, and identity never comes from a
// message. This package must not know about the tracing pipeline: the
// producer port reaches it through the Backend interface.
package perfettoipc
