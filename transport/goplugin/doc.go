// Package goplugin is the go-plugin producer transport: a data source
// whose code runs in a plugin executable (plugins/sdk), launched and
// contained by plugins/host. It owns the instance's side of that: the
// memfd SMB the plugin maps, the plugin's launch, handshake and
// lifecycle as a transport.Transport (Plugin), the words a failure is
// reported in (exit status, memory or CPU limit, the last stderr lines),
// and the plugin's stderr, logged within a rate and counted beyond it.
//
// The session (package pipeline) builds it from a data source's config
// and drives it through transport.Transport; commits come back over the
// plugin's gRPC stream to the Link the session handed Start, and the
// session validates them as untrusted input. This package must not import
// pipeline, trust what the plugin reports about itself (its pid, its
// loss counters), or wait without a bound.
package goplugin
