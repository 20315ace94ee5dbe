// Package sdk is what a data-source plugin's main() uses to serve its data
// sources to tracepipe over go-plugin and gRPC:
//
//	func main() {
//		sdk.Serve(map[string]plugins.Factory{"my.source": newMySource})
//	}
//
// It owns the plugin (child) side of the protocol in plugins/internal/wire:
// on Setup it maps the SMB memfd the host passed as fd 3 (smb.MapFD), checks
// it against the sizes the host announced, builds an smb.Arbiter over it
// (CommitBatched) and the requested data source from its factory; on Start
// it hands the data source a plugins.Host whose writers are smb.TraceWriters
// targeting the host's buffer with the host's policy; every CommitData the
// arbiter delivers is encoded and sent, in order, on the Commits stream; a
// 50 ms ticker flushes pending commits so that a slow source's chunks are
// not held back. Flush(id) flushes the data source and then acknowledges id
// with a commit that carries flush_request_id (even an otherwise empty one);
// Stop stops the data source, closes its writers, sends the last commits
// and ends the stream.
//
// The SDK serialises Start, Flush, ClearIncrementalState and Stop, so a data
// source sees the call order plugins.DataSource promises even if the host
// misbehaves. It must not block a data source's writers on the gRPC stream
// longer than backpressure requires: a commit waits only for room in a
// bounded queue (the host reading slowly), and once the stream is gone
// commits are discarded instead of waited on. It must not interpret trace
// data, and it trusts nothing the host sends beyond what the SMB mapping
// itself proves (sizes are checked against the mapped memfd).
package sdk
