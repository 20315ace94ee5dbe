// Package sdk is what a data-source plugin's main() uses to serve its data
// sources to tracepipe over go-plugin and gRPC:
//
//	func main() {
//		sdk.Serve(map[string]plugins.Factory{"my.source": newMySource})
//	}
//
// It owns the plugin (child) side of the protocol in plugins/internal/wire
// (datasource.proto): Describe and Validate answer from the sources'
// descriptions and factories without setting anything up; on Setup it maps
// the SMB memfd the host passed as fd 3 (smb.MapFD), checks it against the
// sizes the host announced, builds the requested data source from its
// factory (config problems go back with their paths) and runs it on the
// producer runtime (plugins/producer), the same one in-process data sources
// run on: writers targeting the host's buffer with the host's policy,
// batched commits pushed every 50 ms, Flush(id) acknowledged with a commit
// carrying flush_request_id (even an otherwise empty one), Stop closing the
// writers. Every CommitData is encoded and sent, in order, on the Commits
// stream, which also carries DataSourceDone when a plugins.Finite source is
// done.
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
