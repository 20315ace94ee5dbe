package tracefile

import (
	"github.com/tracepipe/tracepipe/internal/wire"
)

// TraceConfig is the part of a session's config that has a Perfetto
// TraceConfig equivalent (reference/service.md §9): what the service echoes
// as TracePacket.trace_config so that viewers show how a trace was
// recorded. Durations are in milliseconds, sizes as Perfetto names them.
type TraceConfig struct {
	Buffers            []TraceConfigBuffer
	DataSources        []TraceConfigDataSource
	DurationMs         uint64
	SMBSizeKB          uint64 // producers.shm_size_kb
	SMBPageSizeKB      uint64 // producers.page_size_kb
	WriteIntoFile      bool
	FileWritePeriodMs  uint64 // written with WriteIntoFile
	MaxFileSizeBytes   uint64 // 0: not written
	FlushPeriodMs      uint64 // 0: not written
	FlushTimeoutMs     uint64
	IncrementalClearMs uint64 // incremental_state_config.clear_period_ms; 0: not written
}

// TraceConfigBuffer is one TraceConfig.BufferConfig.
type TraceConfigBuffer struct {
	SizeKB  uint64
	Discard bool // fill_policy DISCARD, else RING_BUFFER
	Name    string
	// TransferOnClone, ClearBeforeClone: BufferConfig fields 5 and 6,
	// written when set.
	TransferOnClone, ClearBeforeClone bool
}

// TraceConfigDataSource is one TraceConfig.DataSource's DataSourceConfig.
type TraceConfigDataSource struct {
	Name            string
	TargetBuffer    uint64
	StallWhenFull   bool   // buffer_exhausted_policy STALL_THEN_DROP, else DROP
	ProtoVMMemoryKB uint64 // protovm_config.memory_limit_kb, written with HasProtoVM
	HasProtoVM      bool
	// SourceConfig is the data source's own config (DataSourceConfig
	// fields 100 and up, serialized: ftrace_config, sys_stats_config, ...),
	// appended as it is.
	SourceConfig []byte
}

// TraceConfig field numbers (reference/service.md §9).
const (
	tcBuffers                = 1
	tcDataSources            = 2
	tcDurationMs             = 3
	tcProducers              = 6
	tcWriteIntoFile          = 8
	tcFileWritePeriodMs      = 9
	tcMaxFileSizeBytes       = 10
	tcFlushPeriodMs          = 13
	tcFlushTimeoutMs         = 14
	tcIncrementalStateConfig = 21

	bufSizeKB           = 1
	bufFillPolicy       = 4
	bufName             = 7
	bufTransferOnClone  = 5
	bufClearBeforeClone = 6

	dsConfig           = 1 // TraceConfig.DataSource.config
	dscName            = 1 // DataSourceConfig.name
	dscTargetBuffer    = 2
	dscBufferExhausted = 9
	dscProtoVMConfig   = 12
	protoVMMemoryKB    = 1

	isClearPeriodMs = 1

	prodShmSizeKB  = 2
	prodPageSizeKB = 3

	fillRingBuffer = 1 // BufferConfig.FillPolicy RING_BUFFER
	fillDiscard    = 2 // DISCARD
	exhaustedDrop  = 1 // DataSourceConfig.BufferExhaustedPolicy DROP
	exhaustedStall = 3 // STALL_THEN_DROP
)

// AppendTraceConfig appends tc as a TracePacket.trace_config field (33).
func AppendTraceConfig(dst []byte, tc *TraceConfig) []byte {
	return wire.AppendNested(dst, FieldTraceConfig, func(b []byte) []byte {
		for _, bc := range tc.Buffers {
			b = wire.AppendNested(b, tcBuffers, func(m []byte) []byte {
				m = wire.AppendVarint(m, bufSizeKB, bc.SizeKB)
				policy := uint64(fillRingBuffer)
				if bc.Discard {
					policy = fillDiscard
				}
				m = wire.AppendVarint(m, bufFillPolicy, policy)
				if bc.Name != "" {
					m = wire.AppendString(m, bufName, bc.Name)
				}
				if bc.TransferOnClone {
					m = wire.AppendVarint(m, bufTransferOnClone, 1)
				}
				if bc.ClearBeforeClone {
					m = wire.AppendVarint(m, bufClearBeforeClone, 1)
				}
				return m
			})
		}
		for _, dc := range tc.DataSources {
			b = wire.AppendNested(b, tcDataSources, func(ds []byte) []byte {
				return wire.AppendNested(ds, dsConfig, func(c []byte) []byte {
					c = wire.AppendString(c, dscName, dc.Name)
					c = wire.AppendVarint(c, dscTargetBuffer, dc.TargetBuffer)
					policy := uint64(exhaustedDrop)
					if dc.StallWhenFull {
						policy = exhaustedStall
					}
					c = wire.AppendVarint(c, dscBufferExhausted, policy)
					if dc.HasProtoVM {
						c = wire.AppendNested(c, dscProtoVMConfig, func(p []byte) []byte {
							return wire.AppendVarint(p, protoVMMemoryKB, dc.ProtoVMMemoryKB)
						})
					}
					return append(c, dc.SourceConfig...)
				})
			})
		}
		b = wire.AppendVarint(b, tcDurationMs, tc.DurationMs)
		b = wire.AppendNested(b, tcProducers, func(p []byte) []byte {
			p = wire.AppendVarint(p, prodShmSizeKB, tc.SMBSizeKB)
			return wire.AppendVarint(p, prodPageSizeKB, tc.SMBPageSizeKB)
		})
		if tc.WriteIntoFile {
			b = wire.AppendVarint(b, tcWriteIntoFile, 1)
			b = wire.AppendVarint(b, tcFileWritePeriodMs, tc.FileWritePeriodMs)
		}
		if tc.MaxFileSizeBytes > 0 {
			b = wire.AppendVarint(b, tcMaxFileSizeBytes, tc.MaxFileSizeBytes)
		}
		if tc.FlushPeriodMs > 0 {
			b = wire.AppendVarint(b, tcFlushPeriodMs, tc.FlushPeriodMs)
		}
		b = wire.AppendVarint(b, tcFlushTimeoutMs, tc.FlushTimeoutMs)
		if tc.IncrementalClearMs > 0 {
			b = wire.AppendNested(b, tcIncrementalStateConfig, func(m []byte) []byte {
				return wire.AppendVarint(m, isClearPeriodMs, tc.IncrementalClearMs)
			})
		}
		return b
	})
}

// SystemInfo is what the service reports about the machine as
// TracePacket.system_info (45).
type SystemInfo struct {
	HasUname                           bool // utsname (1) is written only when known
	Sysname, Version, Release, Machine string
	ServiceVersion                     string // tracing_service_version (4)
	PageSize                           uint64 // page_size (6)
	NumCPUs                            uint64 // num_cpus (8)
}

// AppendSystemInfo appends si as a system_info field (45).
func AppendSystemInfo(dst []byte, si *SystemInfo) []byte {
	return wire.AppendNested(dst, FieldSystemInfo, func(b []byte) []byte {
		if si.HasUname {
			b = wire.AppendNested(b, 1, func(u []byte) []byte {
				u = wire.AppendString(u, 1, si.Sysname)
				u = wire.AppendString(u, 2, si.Version)
				u = wire.AppendString(u, 3, si.Release)
				return wire.AppendString(u, 4, si.Machine)
			})
		}
		b = wire.AppendString(b, 4, si.ServiceVersion)
		b = wire.AppendVarint(b, 6, si.PageSize)
		return wire.AppendVarint(b, 8, si.NumCPUs)
	})
}
