package tpimport

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/tracefile"
)

// traceConfig remembers the config (the last one wins) and raises
// config_write_into_file_discard when the packet is read.
func (c *Checker) traceConfig(b []byte, off int64) {
	c.config = append(c.config[:0], b...)
	cfg := parseConfig(b)
	if !cfg.writeIntoFile {
		return
	}
	for i, p := range cfg.fillPolicies {
		if p == fillDiscard {
			c.setStat("config_write_into_file_discard", i, SeverityDataLoss, 1)
		}
	}
}

type traceConfig struct {
	writeIntoFile   bool
	fileWritePeriod uint64
	flushPeriod     uint64
	fillPolicies    []uint64
}

func parseConfig(b []byte) traceConfig {
	var cfg traceConfig
	_ = walk(b, func(f field) bool {
		switch {
		case f.num == tcBuffers && f.typ == protowire.BytesType:
			var policy uint64
			_ = walk(f.payload, func(g field) bool {
				if g.num == bufFillPolicy && g.typ == protowire.VarintType {
					policy = g.v
				}
				return true
			})
			cfg.fillPolicies = append(cfg.fillPolicies, policy)
		case f.num == tcWriteIntoFile && f.typ == protowire.VarintType:
			cfg.writeIntoFile = f.v != 0
		case f.num == tcFileWritePeriodMs && f.typ == protowire.VarintType:
			cfg.fileWritePeriod = f.v
		case f.num == tcFlushPeriodMs && f.typ == protowire.VarintType:
			cfg.flushPeriod = f.v
		}
		return true
	})
	return cfg
}

func (c *Checker) systemInfo(b []byte) {
	_ = walk(b, func(f field) bool {
		if f.num == siServiceVersion && f.typ == protowire.BytesType {
			c.serviceVer, c.hasServiceVer = string(f.payload), true
		}
		return true
	})
}

// ServiceMajorVersion parses system_info.tracing_service_version the way
// trace_processor does (ParseTracingServiceMajorVersion): the string must
// start with exactly "Perfetto v", the major is the text up to the first
// '.' or '-' (one must exist) and must be a uint32.
func ServiceMajorVersion(v string) (uint32, bool) {
	rest, ok := strings.CutPrefix(v, "Perfetto v")
	if !ok {
		return 0, false
	}
	i := strings.IndexAny(rest, ".-")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(rest[:i], 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}

// finishConfig evaluates the last trace_config at the end of the import.
func (c *Checker) finishConfig() {
	if c.config == nil {
		return
	}
	cfg := parseConfig(c.config)
	if !cfg.writeIntoFile {
		return
	}
	if cfg.fileWritePeriod < longTraceModePeriodMs && c.lastStats != nil {
		for i, b := range c.lastStats.BufferStats {
			if b.BytesOverwritten > 0 {
				c.setStat("long_trace_mode_bytes_overwritten", i, SeverityDataLoss, int64(b.BytesOverwritten))
			}
		}
	}
	if cfg.flushPeriod == 0 {
		major, ok := ServiceMajorVersion(c.serviceVer)
		if !c.hasServiceVer || !ok || major < minFlushingServiceMajor {
			c.stat("config_write_into_file_no_flush", -1, SeverityError, 1)
		}
	}
}

// traceStats applies one trace_stats packet (each sets its stats; the last
// wins), including the per-sequence loss stats of writer_stats.
func (c *Checker) traceStats(b []byte, machine uint32) {
	ts, err := tracefile.DecodeTraceStats(b)
	if err != nil {
		return // strict decoding reports malformed payloads
	}
	c.lastStats = &ts
	if tp := ts.Tracepipe; tp != nil {
		c.sinkSection(tp, machine)
		if tp.Receiver != nil {
			c.receiverSection(tp.Receiver, machine)
		}
	}
	c.setStat("traced_flushes_failed", -1, SeverityDataLoss, int64(ts.FlushesFailed))
	if ts.FinalFlushOutcome == tracefile.FlushOutcomeFailed {
		c.stat("traced_final_flush_failed", -1, SeverityDataLoss, 1)
	}
	for i, bs := range ts.BufferStats {
		c.setStat("traced_buf_bytes_overwritten", i, SeverityInfo, int64(bs.BytesOverwritten))
		c.setStat("traced_buf_patches_failed", i, SeverityDataLoss, int64(bs.PatchesFailed))
		c.setStat("traced_buf_abi_violations", i, SeverityDataLoss, int64(bs.AbiViolations))
		c.setStat("traced_buf_trace_writer_packet_loss", i, SeverityDataLoss, int64(bs.TraceWriterPacketLoss))
	}
	type acc struct {
		loss, dropped int64
		causes        [len(lossCauseNames)]int64
	}
	per := map[int]*acc{}
	for _, w := range ts.WriterStats {
		s := c.seqs[seqKey{machine, uint32(w.SequenceID)}]
		if s == nil || !s.seen {
			continue
		}
		b := int(w.Buffer)
		a := per[b]
		if a == nil {
			a = &acc{}
			per[b] = a
		}
		a.loss += s.rep.PacketLoss
		if s.rep.NeedsSkipped > 0 && s.rep.NeedsSkipped == s.rep.NeedsTotal {
			a.dropped++
		}
		for i, n := range lossCauseNames {
			a.causes[i] += s.rep.LossCauses[n]
		}
	}
	for b, a := range per {
		c.setStat("traced_buf_sequence_packet_loss", b, SeverityDataLoss, a.loss)
		c.setStat("traced_buf_incremental_sequences_dropped", b, SeverityDataLoss, a.dropped)
		for i, n := range lossCauseNames {
			c.setStat("traced_buf_data_loss_"+n, b, SeverityDataLoss, a.causes[i])
		}
	}
}
