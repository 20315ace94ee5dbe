// Package plugins owns the contract between the service and every data
// source: the DataSource, Host and PacketWriter interfaces, the optional
// Finite interface of sources that end on their own, and the registry that
// maps data source names (data_sources[i].name) to factories. The built-in
// sources live in plugins/builtin.
//
// A data source writes through PacketWriter, which in the service is an
// smb.TraceWriter (whole packets, or fields straight into chunk memory with
// NewTracePacket; plugins/trackevent builds TrackEvents on it). Every data
// source runs on the same producer runtime (plugins/producer): in-process
// sources take the same SMB and CommitData path as an out-of-process
// producer, so the service validates their bytes exactly as it would a
// stranger's. Out-of-process plugins are served by plugins/sdk in the child
// and driven by plugins/host in the service (go-plugin over gRPC with the
// protocol of plugins/internal/wire/datasource.proto, the SMB memfd handed
// to the child as fd 3). ConfigProblems is the convention by which a
// factory reports config problems per key.
//
// This package must not touch trace buffers or sinks, and nothing a data
// source writes is trusted by the service.
package plugins
