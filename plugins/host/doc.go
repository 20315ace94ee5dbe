// Package host launches out-of-process data-source plugins and drives them:
// it starts the plugin executable as a child with hashicorp/go-plugin over
// gRPC, hands it the producer's SMB (a sealed memfd, as fd 3 of the child),
// sets the requested data source up, and relays the child's CommitData
// stream to the caller (OnCommit) while forwarding Start, Flush,
// ClearIncrementalState and Stop.
//
// The host never trusts the plugin: the CommitData bytes it relays are
// opaque here and the caller (the service) decodes and validates them, and
// every chunk they name, with smb.Reader; the caller stamps Pid as the
// producer's trusted pid instead of anything the plugin says. Every RPC has
// a deadline and the handshake is bounded, so a hung or crashed child turns
// into errors and a closed commit stream, never a hung or panicking host.
// Beyond the control calls, Done and Err tell the caller when the commit
// stream ended (a clean Stop, a crash, Kill) and why; after Done, OnCommit
// is never called again, so the caller may release the SMB.
//
// The child is contained as a process tree (contain_linux.go): whatever it
// starts, setsid'd or double-forked, ends with it (a cgroup v2 where one
// can be created, else a sweep by process group, ancestry and an
// environment marker); Config.Limits bound its memory and CPU time (cgroup
// memory.max or rlimits set by a re-exec shim before the plugin runs), and
// LimitExceeded names a breach.
//
// This package must not interpret trace data, touch trace buffers or sinks,
// or read the SMB itself.
package host
