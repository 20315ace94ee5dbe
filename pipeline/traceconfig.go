package pipeline

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tracepipe/tracepipe/config"
	"github.com/tracepipe/tracepipe/internal/wire"
	"github.com/tracepipe/tracepipe/tracefile"
)

// appendTraceConfig appends the session config as TracePacket.trace_config
// (field 33), the way Perfetto's service echoes its TraceConfig in the
// first read pass, so that trace viewers show how the trace was recorded.
// Only the fields with a Perfetto equivalent are written (tracefile owns
// the encoding): a Perfetto producer's data-source configs
// (perfetto_config, or the consumer's DataSourceConfig) are echoed as
// sent; the config sections of built-in and plugin sources
// (data_sources[i].config) have no generic encoding and are left out.
func appendTraceConfig(dst []byte, c *config.Config) []byte {
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
			SizeKB: uint64(bc.SizeKB), Discard: bc.FillPolicy == config.FillPolicyDiscard, Name: bc.Name,
			TransferOnClone: bc.TransferOnClone, ClearBeforeClone: bc.ClearBeforeClone,
		})
	}
	for _, dc := range c.DataSources {
		ds := tracefile.TraceConfigDataSource{
			Name:          dc.Name,
			TargetBuffer:  uint64(dc.TargetBuffer),
			StallWhenFull: dc.BufferExhaustedPolicy == config.BufferExhaustedStall,
		}
		ds.SourceConfig = sourceConfigFields(dc.EncodedPerfettoConfig)
		if dc.ProtoVM != nil {
			ds.HasProtoVM, ds.ProtoVMMemoryKB = true, uint64(dc.ProtoVM.MemoryLimitKB)
		}
		tc.DataSources = append(tc.DataSources, ds)
	}
	return tracefile.AppendTraceConfig(dst, &tc)
}

func millis(d time.Duration) uint64 { return uint64(d / time.Millisecond) }

// sourceConfigFields returns the fields 100 and up of a serialized
// DataSourceConfig (the data source's own configs), nil when it has none
// or does not parse (Validate refuses such a config).
func sourceConfigFields(dsc []byte) []byte {
	var out []byte
	it := wire.Fields(dsc)
	for it.Next() {
		if f := it.Field(); f.Num >= 100 {
			out = append(out, f.Raw(dsc)...)
		}
	}
	if it.Err() != nil {
		return nil
	}
	return out
}

// sourceConfigNames names the fields of sourceConfigFields' output by the
// schema (field numbers where it does not know them).
func sourceConfigNames(fields []byte) string {
	var names []string
	it := wire.Fields(fields)
	for it.Next() {
		num := it.Field().Num
		name := fmt.Sprintf("field %d", num)
		if fd := config.DataSourceConfigDesc().Fields().ByNumber(num); fd != nil {
			name = string(fd.Name())
		}
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return strings.Join(names, ", ")
}
