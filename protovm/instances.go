package protovm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file holds the service-side set of ProtoVM instances of one trace
// buffer (Perfetto's TraceBufferV2 ProtoVM hook and
// TracingServiceImpl::MaybeEmitProtoVmInstances, protovm.md §7). It knows
// nothing of the buffer: the buffer's overwrite observer calls Observe.

// Field numbers of TracePacket.protovms (TracePacket field 125,
// TracePacket.ProtoVms and ProtoVms.Instance).
const (
	tracePacketProtoVmsField = 125
	protoVmsInstanceField    = 1
	instanceProgramField     = 1
	instanceStateField       = 2
	instanceMemoryLimitField = 3
	instanceProducerIDField  = 4
)

// maxRetainedScratch bounds the join buffer kept between Observe calls, so
// one huge fragmented packet does not pin its size for the whole session.
const maxRetainedScratch = 1 << 20

// Instances is the set of ProtoVM instances of one trace buffer: one VM per
// (data source name, program), each fed the packets that the ring buffer
// overwrites for the producers in its producer set. The zero value is an
// empty, usable set. It is not safe for concurrent use: like the buffer,
// its owner serialises every call.
type Instances struct {
	list       []*instance
	scratch    []byte
	stats      InstancesStats
	generation uint64
	readOnly   bool
	onAbort    func(dataSource string, st Status)

	// emitState holds the serialised states during
	// AppendProtoVMsField; kept to avoid reallocating on every emission.
	emitState []byte
}

// instance is one VM with its identity and producer set.
type instance struct {
	dataSource    string
	hash          uint64
	memoryLimitKB uint32
	vm            *VM
	producers     []int32 // ascending, no duplicates

	stateOff, stateLen int // scratch positions during AppendProtoVMsField
}

// InstancesStats counts what Observe did with the packets it was given.
type InstancesStats struct {
	// PatchesOk counts ApplyPatch calls that returned Ok, i.e. packets
	// folded into a state (at most one VM folds a packet).
	PatchesOk uint64
	// PatchesError counts ApplyPatch calls that returned Error (typically
	// packets of another data source of the same producer).
	PatchesError uint64
	// PatchesAbort counts ApplyPatch calls that returned Abort (program
	// bug, incompatible data, memory limit, read-only clone).
	PatchesAbort uint64
	// PacketsUnrouted counts packets whose producer is in no VM's
	// producer set (not offered to any VM).
	PacketsUnrouted uint64
	// PacketsUnfolded counts packets offered to at least one VM where no
	// VM returned Ok: their information is lost.
	PacketsUnfolded uint64
	// MemoryLimitHits is the sum of the VMs' Stats().MemoryLimitHits.
	MemoryLimitHits uint64
}

// StatCount is one named counter.
type StatCount struct {
	Name  string
	Value uint64
}

// Fields lists the counters by name, in a fixed order.
func (s InstancesStats) Fields() []StatCount {
	return []StatCount{
		{"protovm_patches_ok", s.PatchesOk},
		{"protovm_patches_error", s.PatchesError},
		{"protovm_patches_abort", s.PatchesAbort},
		{"protovm_packets_unrouted", s.PacketsUnrouted},
		{"protovm_packets_unfolded", s.PacketsUnfolded},
		{"protovm_memory_limit_hits", s.MemoryLimitHits},
	}
}

// programHash is the 64-bit FNV-1a hash of the program bytes (Perfetto
// hashes the serialised program with base::Hasher, also FNV-1a 64).
func programHash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// ErrReadOnlyInstances is returned by Add on a read-only clone.
var ErrReadOnlyInstances = errors.New("protovm: cannot add a VM to a read-only clone of the instances")

// Add registers producerID for the VM of dataSource running program:
// the VM with the same data source name and the same 64-bit program hash is
// reused (the producer is added to its producer set), else a new VM is
// created with memoryLimitKB*1024 bytes of state (the limit of a reused VM
// stays the one of its creation). VMs keep their creation order. The error
// is New's (an invalid program); nothing is registered then.
//
// Unlike Perfetto, which trusts the hash alone, a reused VM must also have
// identical program bytes, so a hash collision makes a separate VM instead
// of feeding one producer's packets to another producer's program.
func (s *Instances) Add(dataSource string, program []byte, memoryLimitKB uint32, producerID int32) (*VM, error) {
	if s.readOnly {
		return nil, ErrReadOnlyInstances
	}
	h := programHash(program)
	for _, in := range s.list {
		if in.hash == h && in.dataSource == dataSource && bytes.Equal(in.vm.Program(), program) {
			in.addProducer(producerID)
			return in.vm, nil
		}
	}
	vm, err := New(program, int(memoryLimitKB)*1024)
	if err != nil {
		return nil, fmt.Errorf("protovm: data source %q: %w", dataSource, err)
	}
	in := &instance{dataSource: dataSource, hash: h, memoryLimitKB: memoryLimitKB, vm: vm}
	in.addProducer(producerID)
	s.list = append(s.list, in)
	return vm, nil
}

func (in *instance) addProducer(id int32) {
	i, found := slices.BinarySearch(in.producers, id)
	if !found {
		in.producers = slices.Insert(in.producers, i, id)
	}
}

func (in *instance) hasProducer(id int32) bool {
	for _, p := range in.producers {
		if p == id {
			return true
		}
	}
	return false
}

// SetAbortHandler installs fn (nil removes it), called for every patch a
// VM aborts, with the VM's data source name and the status (whose Stack
// holds the abort messages). The service logs these, as Perfetto does.
func (s *Instances) SetAbortHandler(fn func(dataSource string, st Status)) { s.onAbort = fn }

// Observe is the overwrite observer's work: it joins the fragments of one
// overwritten packet of producer producerID and offers it to the VMs whose
// producer set holds producerID, in creation order, stopping at the first
// that returns Ok (Error or Abort: the next one is tried; changes made
// before the failure stay, as in Perfetto). The fragments are only read
// during the call. In steady state Observe does not allocate.
func (s *Instances) Observe(producerID int32, packet [][]byte) {
	var data []byte
	joined := false
	offered := false
	for _, in := range s.list {
		if !in.hasProducer(producerID) {
			continue
		}
		if !joined {
			data = s.join(packet)
			joined = true
		}
		offered = true
		st := in.vm.ApplyPatch(data)
		switch st.Code {
		case Ok:
			s.stats.PatchesOk++
			s.generation++
			s.releaseScratch()
			return
		case Error:
			s.stats.PatchesError++
		default:
			s.stats.PatchesAbort++
			if s.onAbort != nil {
				s.onAbort(in.dataSource, st)
			}
		}
	}
	if offered {
		s.stats.PacketsUnfolded++
	} else {
		s.stats.PacketsUnrouted++
	}
	s.releaseScratch()
}

// join returns the packet bytes: the single fragment itself, or the
// fragments concatenated into the reused scratch buffer.
func (s *Instances) join(packet [][]byte) []byte {
	if len(packet) == 1 {
		return packet[0]
	}
	b := s.scratch[:0]
	for _, f := range packet {
		b = append(b, f...)
	}
	s.scratch = b
	return b
}

func (s *Instances) releaseScratch() {
	if cap(s.scratch) > maxRetainedScratch {
		s.scratch = nil
	}
}

// Generation counts the patches that returned Ok since the set was
// created: when it advanced, a state may have changed and the service may
// emit the states again (streaming mode). A clone keeps the value.
func (s *Instances) Generation() uint64 { return s.generation }

// Stats returns the outcome counters.
func (s *Instances) Stats() InstancesStats {
	st := s.stats
	for _, in := range s.list {
		st.MemoryLimitHits += in.vm.Stats().MemoryLimitHits
	}
	return st
}

// Len is the number of VMs.
func (s *Instances) Len() int { return len(s.list) }

// MemoryUsage is the sum of the VMs' MemoryUsage (Perfetto adds it to the
// buffer's memory usage).
func (s *Instances) MemoryUsage() int {
	n := 0
	for _, in := range s.list {
		n += in.vm.MemoryUsage()
	}
	return n
}

// ReadOnly reports whether the set is a read-only clone.
func (s *Instances) ReadOnly() bool { return s.readOnly }

// CloneReadOnly returns a frozen copy for a cloned buffer: every VM is
// cloned read-only (its state serialised now; patches abort), with the
// same data source names, producer sets, order, counters and generation.
// Add on the clone fails. The clone shares no mutable data with s.
func (s *Instances) CloneReadOnly() *Instances {
	c := &Instances{stats: s.stats, generation: s.generation, readOnly: true}
	c.list = make([]*instance, len(s.list))
	for i, in := range s.list {
		c.list[i] = &instance{
			dataSource:    in.dataSource,
			hash:          in.hash,
			memoryLimitKB: in.memoryLimitKB,
			vm:            in.vm.CloneReadOnly(),
			producers:     slices.Clone(in.producers),
		}
	}
	return c
}

// AppendProtoVMsField appends TracePacket field protovms (125) to dst:
// ProtoVms{ one Instance per VM in creation order: program (1, the
// VmProgram bytes), state (2, the serialised incremental state, present
// even when empty), memory_limit_kb (3), producer_id (4, one unpacked
// varint field per producer, ascending) }. The caller writes the rest of
// the packet (service header, timestamp clock). With no VMs it appends an
// empty ProtoVms; Perfetto emits no packet then, so check Len first.
func (s *Instances) AppendProtoVMsField(dst []byte) []byte {
	states := s.emitState[:0]
	body := 0
	for _, in := range s.list {
		in.stateOff = len(states)
		states = in.vm.SerializeIncrementalState(states)
		in.stateLen = len(states) - in.stateOff
		n := in.size()
		body += protowire.SizeTag(protoVmsInstanceField) + protowire.SizeBytes(n)
	}
	dst = wire.AppendLen(dst, tracePacketProtoVmsField, body)
	for _, in := range s.list {
		dst = wire.AppendLen(dst, protoVmsInstanceField, in.size())
		dst = wire.AppendBytes(dst, instanceProgramField, in.vm.Program())
		dst = wire.AppendBytes(dst, instanceStateField, states[in.stateOff:in.stateOff+in.stateLen])
		dst = wire.AppendVarint(dst, instanceMemoryLimitField, uint64(in.memoryLimitKB))
		for _, p := range in.producers {
			dst = wire.AppendInt32(dst, instanceProducerIDField, p)
		}
	}
	if cap(states) <= maxRetainedScratch {
		s.emitState = states[:0]
	} else {
		s.emitState = nil
	}
	return dst
}

// size is the encoded size of the Instance message (without its tag and
// length), valid after stateLen was set.
func (in *instance) size() int {
	n := protowire.SizeTag(instanceProgramField) + protowire.SizeBytes(len(in.vm.Program()))
	n += protowire.SizeTag(instanceStateField) + protowire.SizeBytes(in.stateLen)
	n += protowire.SizeTag(instanceMemoryLimitField) + protowire.SizeVarint(uint64(in.memoryLimitKB))
	for _, p := range in.producers {
		n += protowire.SizeTag(instanceProducerIDField) + protowire.SizeVarint(uint64(int64(p)))
	}
	return n
}
