package tpimport

import (
	"cmp"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tracepipe/tracepipe/protovm"
	"github.com/tracepipe/tracepipe/tracefile"
)

// provenancePacket maps producer ids to sequence ids (repeated packets
// accumulate), trace-processor-import.md §5.
func (c *Checker) provenancePacket(b []byte) {
	_ = walk(b, func(buf field) bool {
		if buf.num != provBuffers || buf.typ != protowire.BytesType {
			return true
		}
		_ = walk(buf.payload, func(sq field) bool {
			if sq.num != provSequences || sq.typ != protowire.BytesType {
				return true
			}
			var id uint32
			var producer int32
			_ = walk(sq.payload, func(f field) bool {
				switch {
				case f.num == provSeqID && f.typ == protowire.VarintType:
					id = uint32(f.v)
				case f.num == provProducerID && f.typ == protowire.VarintType:
					producer = int32(f.v)
				}
				return true
			})
			c.provenance[producer] = append(c.provenance[producer], id)
			return true
		})
		return true
	})
}

// protoVMsPacket creates one VM per instance (every protovms packet is
// processed) and appends it to the VM list of each sequence of its
// producers.
func (c *Checker) protoVMsPacket(b []byte, machine uint32, off int64) {
	_ = walk(b, func(inst field) bool {
		if inst.num != pvmInstance || inst.typ != protowire.BytesType {
			return true
		}
		var program, state []byte
		var hasState bool
		var memKB uint64
		var producers []uint64
		_ = walk(inst.payload, func(f field) bool {
			switch {
			case f.num == pvmProgram && f.typ == protowire.BytesType:
				program = f.payload
			case f.num == pvmState && f.typ == protowire.BytesType:
				state, hasState = f.payload, true
			case f.num == pvmMemoryLimitKB && f.typ == protowire.VarintType:
				memKB = uint64(uint32(f.v)) // a uint32 field
			case f.num == pvmProducerID:
				producers = varints(producers, f)
			}
			return true
		})
		vi := &vmInst{}
		var err error
		if hasState {
			vi.vm, _, err = protovm.NewWithState(program, int(memKB*1024), state)
		} else {
			vi.vm, err = protovm.New(program, int(memKB*1024))
		}
		if err != nil {
			c.finding(CodeProtoVMInvalid, SeverityCheck, seqKey{}, -1, 1, off, "a protovms instance whose program does not load: "+err.Error())
			return true
		}
		c.vms = append(c.vms, vi)
		for _, p := range producers {
			seqs, ok := c.provenance[int32(p)]
			if !ok {
				c.stat("protovm_registration_error", -1, SeverityError, 1)
				continue
			}
			for _, id := range seqs {
				s := c.sequence(seqKey{machine, id})
				if s.rep.Summarised {
					c.finding(CodeNotModelled, SeverityCheck, s.key, -1, 1, off,
						"a ProtoVM of a sequence beyond the tracked ones is not run (raise with --max-sequences)")
					continue
				}
				s.vms = append(s.vms, vi)
			}
		}
		return true
	})
}

// patch offers the packet to the sequence's VMs in order; on the first Ok
// it returns the replacement packet trace_processor imports instead: the
// VM's state plus trusted_uid, trusted_pid, trusted_packet_sequence_id and
// machine_id.
func (c *Checker) patch(s *sequence, pkt []byte, info *tracefile.PacketInfo, off int64) ([]byte, bool) {
	for _, vi := range s.vms {
		st := vi.vm.ApplyPatch(pkt)
		switch st.Code {
		case protovm.Abort:
			c.stat("protovm_abort", -1, SeverityError, 1)
			continue
		case protovm.Error:
			continue
		}
		s.rep.Replaced++
		if !patchOnly(info.PayloadField) {
			c.finding(CodeReplacedPayload, SeverityCheck, s.key, -1, 1, off,
				"the ProtoVM program returned Ok for packets that carry a payload ("+info.Kind()+"): trace_processor replaces each by the VM state, so the payload is lost")
		}
		r := vi.vm.SerializeIncrementalState(c.scratch[:0])
		r = tracefile.AppendTrusted(r, tracefile.Trusted{
			UID: info.TrustedUID, SequenceID: info.SequenceID, PID: info.TrustedPID, HasPID: true, MachineID: info.MachineID,
		})
		c.scratch = r
		return r, true
	}
	return nil, false
}

// patchOnly reports whether a packet whose payload field is f carries
// nothing but incremental state, so its replacement loses nothing.
func patchOnly(f int32) bool {
	return f == 0 || f == tracefile.FieldInternedData || f == tracefile.FieldTracePacketDefaults
}

func sortSequences(s []SequenceReport) {
	slices.SortFunc(s, func(a, b SequenceReport) int {
		return cmp.Or(cmp.Compare(a.Machine, b.Machine), cmp.Compare(a.ID, b.ID))
	})
}

func sortStats(s []Stat) {
	slices.SortFunc(s, func(a, b Stat) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Index, b.Index))
	})
}
