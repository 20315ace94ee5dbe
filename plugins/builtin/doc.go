// Package builtin owns tracepipe's built-in, in-process data sources. They
// register themselves with plugins.Register in this package's init, so the
// pipeline only blank-imports it, and they write through the same
// plugins.Host / PacketWriter (SMB TraceWriter) path as out-of-process
// plugins.
//
// The sources and their config keys (data_sources[i].config.<key>; numbers
// may be given as int, int64, uint64, float64 or json.Number, but must be
// integers; unknown keys are errors with a suggestion; all problems are
// reported at once, each message starting with its key):
//
// tracepipe.synthetic, the load generator for benchmarks and end-to-end
// tests (SyntheticConfig, SyntheticGenerator):
//
//	writers                  1     1..1024 writers (sequences), one goroutine each
//	rate                     0     packets/s per writer, 0 = as fast as possible
//	packet_size              200   approx. TrackEvent packet size, 64..1048576
//	max_packets              0     TrackEvent packets per writer, 0 = until stopped
//	names                    32    distinct interned event names, 1..1000000
//	counter_every            8     every Nth packet is a counter event, 0 = never
//	deterministic_timestamps false packet i has timestamp base + i*1000, base = boot time at start
//
// Each TrackEvent packet carries its per-writer index i in its first debug
// annotation: track_event (11) → debug_annotations (4) → {name (10) "seq",
// int_value (4) i}; SyntheticSeq reads it. The two track-descriptor packets
// at the start of each writer (and after each ClearIncrementalState) carry
// no index and do not count towards max_packets. Synthetic.Done (the
// plugins.Finite contract) is closed once every writer has written
// max_packets and flushed.
//
// linux.process_stats, the process tree from /proc (ProcessStatsConfig):
//
//	scan_all_processes_on_start true  scan /proc on start
//	record_thread_names         true  ProcessTree.Thread.name from task/TID/comm
//	proc_stats_poll_ms          0     rescan period, 0 = off, else >= 100
//
// The tree is also rescanned on every ClearIncrementalState.
//
// linux.sys_stats, system counters from /proc/meminfo, /proc/vmstat and
// /proc/stat with Perfetto's MeminfoCounters / VmstatCounters enum values
// (SysStatsConfig):
//
//	meminfo_period_ms 1000 0 = off, else >= 10
//	vmstat_period_ms  1000 0 = off, else >= 10
//	stat_period_ms    1000 0 = off, else >= 10
//
// Rules every source here follows:
//
//   - A factory only parses and validates; no goroutine and no I/O happen
//     before Start.
//   - A writer is used by exactly one goroutine, the one the source started
//     for it. Flush posts a request to each such goroutine and waits for its
//     ack (at most FlushTimeout); ClearIncrementalState only posts a request
//     and returns; Stop returns once no goroutine of the instance writes any
//     more, after each has closed (or, if the writer cannot be closed,
//     flushed) its writer.
//   - Packets are hand-encoded with protowire appends into reused scratch
//     buffers. They never contain a field only the service may set
//     (trusted_uid 3, trusted_packet_sequence_id 10, trusted_pid 79,
//     machine_id 98, trace_config 33, trace_stats 35, ...): the service
//     rejects such packets.
//   - Nothing here may block the service: write errors (e.g. a stalled SMB)
//     and unreadable /proc files are counted in Stats and the source keeps
//     going.
package builtin
