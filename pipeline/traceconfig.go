package pipeline

import (
	"time"

	"github.com/tracepipe/tracepipe/tracefile"
)

// appendTraceConfig appends the session config as TracePacket.trace_config
// (field 33), the way Perfetto's service echoes its TraceConfig in the
// first read pass, so that trace viewers show how the trace was recorded.
// Only the fields with a Perfetto equivalent are written (tracefile owns
// the encoding); per-source config sections (data_sources[i].config) have
// no generic encoding and are left out.
func appendTraceConfig(dst []byte, c *Config) []byte {
	tc := tracefile.TraceConfig{
		DurationMs:        millis(c.Duration),
		SMBSizeKB:         uint64(c.Producers.SMBSizeKB),
		SMBPageSizeKB:     uint64(c.Producers.SMBPageSizeKB),
		WriteIntoFile:     c.WriteIntoFile,
		FileWritePeriodMs: millis(c.FileWritePeriod),
		FlushPeriodMs:     millis(c.FlushPeriod),
		FlushTimeoutMs:    millis(c.FlushTimeout),
	}
	if c.MaxFileSize > 0 {
		tc.MaxFileSizeBytes = uint64(c.MaxFileSize)
	}
	if c.IncrementalState.ClearPeriod > 0 {
		tc.IncrementalClearMs = millis(c.IncrementalState.ClearPeriod)
	}
	for _, bc := range c.Buffers {
		tc.Buffers = append(tc.Buffers, tracefile.TraceConfigBuffer{
			SizeKB: uint64(bc.SizeKB), Discard: bc.FillPolicy == FillPolicyDiscard, Name: bc.Name,
			TransferOnClone: bc.TransferOnClone, ClearBeforeClone: bc.ClearBeforeClone,
		})
	}
	for _, dc := range c.DataSources {
		ds := tracefile.TraceConfigDataSource{
			Name:          dc.Name,
			TargetBuffer:  uint64(dc.TargetBuffer),
			StallWhenFull: dc.BufferExhaustedPolicy == BufferExhaustedStall,
		}
		if dc.ProtoVM != nil {
			ds.HasProtoVM, ds.ProtoVMMemoryKB = true, uint64(dc.ProtoVM.MemoryLimitKB)
		}
		tc.DataSources = append(tc.DataSources, ds)
	}
	return tracefile.AppendTraceConfig(dst, &tc)
}

func millis(d time.Duration) uint64 { return uint64(d / time.Millisecond) }
