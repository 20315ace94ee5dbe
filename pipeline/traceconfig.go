package pipeline

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TraceConfig field numbers (reference/service.md §9) of what tracepipe's
// config maps to.
const (
	tcBuffers                = 1
	tcDataSources            = 2
	tcDurationMs             = 3
	tcWriteIntoFile          = 8
	tcFileWritePeriodMs      = 9
	tcMaxFileSizeBytes       = 10
	tcFlushPeriodMs          = 13
	tcFlushTimeoutMs         = 14
	tcIncrementalStateConfig = 21
	tcProducers              = 6

	bufSizeKB     = 1
	bufFillPolicy = 4
	bufName       = 7
	// BufferConfig.transfer_on_clone (5), clear_before_clone (6).
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
	exhaustedStall = 3 // STALL_THEN_DROP: tracepipe's stall drops after its timeout
)

// appendTraceConfig appends the session config as TracePacket.trace_config
// (field 33), the way Perfetto's service echoes its TraceConfig in the
// first read pass, so that trace viewers show how the trace was recorded.
// Only the fields with a Perfetto equivalent are written; per-source
// config sections (data_sources[i].config) have no generic encoding and
// are left out.
func appendTraceConfig(dst []byte, c *Config) []byte {
	var b []byte
	for _, bc := range c.Buffers {
		var m []byte
		m = appendVarint(m, bufSizeKB, uint64(bc.SizeKB))
		policy := uint64(fillRingBuffer)
		if bc.FillPolicy == FillPolicyDiscard {
			policy = fillDiscard
		}
		m = appendVarint(m, bufFillPolicy, policy)
		if bc.Name != "" {
			m = appendString(m, bufName, bc.Name)
		}
		if bc.TransferOnClone {
			m = appendVarint(m, bufTransferOnClone, 1)
		}
		if bc.ClearBeforeClone {
			m = appendVarint(m, bufClearBeforeClone, 1)
		}
		b = appendMessage(b, tcBuffers, m)
	}
	for _, dc := range c.DataSources {
		var cfg []byte
		cfg = appendString(cfg, dscName, dc.Name)
		cfg = appendVarint(cfg, dscTargetBuffer, uint64(dc.TargetBuffer))
		policy := uint64(exhaustedDrop)
		if dc.BufferExhaustedPolicy == BufferExhaustedStall {
			policy = exhaustedStall
		}
		cfg = appendVarint(cfg, dscBufferExhausted, policy)
		if dc.ProtoVM != nil {
			cfg = appendMessage(cfg, dscProtoVMConfig, appendVarint(nil, protoVMMemoryKB, uint64(dc.ProtoVM.MemoryLimitKB)))
		}
		b = appendMessage(b, tcDataSources, appendMessage(nil, dsConfig, cfg))
	}
	b = appendVarint(b, tcDurationMs, millis(c.Duration))
	var prod []byte
	prod = appendVarint(prod, prodShmSizeKB, uint64(c.Producers.SMBSizeKB))
	prod = appendVarint(prod, prodPageSizeKB, uint64(c.Producers.SMBPageSizeKB))
	b = appendMessage(b, tcProducers, prod)
	if c.WriteIntoFile {
		b = appendVarint(b, tcWriteIntoFile, 1)
		b = appendVarint(b, tcFileWritePeriodMs, millis(c.FileWritePeriod))
	}
	if c.MaxFileSize > 0 {
		b = appendVarint(b, tcMaxFileSizeBytes, uint64(c.MaxFileSize))
	}
	if c.FlushPeriod > 0 {
		b = appendVarint(b, tcFlushPeriodMs, millis(c.FlushPeriod))
	}
	b = appendVarint(b, tcFlushTimeoutMs, millis(c.FlushTimeout))
	if c.IncrementalState.ClearPeriod > 0 {
		b = appendMessage(b, tcIncrementalStateConfig, appendVarint(nil, isClearPeriodMs, millis(c.IncrementalState.ClearPeriod)))
	}
	return appendMessage(dst, 33, b) // TracePacket.trace_config
}

func millis(d time.Duration) uint64 { return uint64(d / time.Millisecond) }

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}
