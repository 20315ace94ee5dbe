// Package protovm owns ProtoVM: the program format (wire-compatible with
// Perfetto's VmProgram protos), the interpreter that applies a packet as a
// patch to a proto-encoded incremental state under a memory limit, and a
// compiler from a readable program description.
//
// It must not know where packets come from (the trace buffer feeds it through
// an observer) and must never run unbounded: programs are not Turing-complete
// and every patch is bounded in time and memory.
package protovm
