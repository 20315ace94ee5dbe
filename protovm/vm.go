package protovm

import "fmt"

// Stats counts ApplyPatch outcomes.
type Stats struct {
	// PatchesApplied counts patches that returned Ok.
	PatchesApplied uint64
	// PatchesFailed counts patches that returned Error.
	PatchesFailed uint64
	// PatchesAborted counts patches that returned Abort (including those
	// offered to a read-only clone).
	PatchesAborted uint64
	// MemoryLimitHits counts patches during which an allocation was refused
	// because of the memory limit (those patches abort).
	MemoryLimitHits uint64
}

// VM is one ProtoVM instance: a program, an incremental state and 32
// registers that persist across patches. A VM is not safe for concurrent
// use.
type VM struct {
	program []byte
	prog    *Program

	readOnly bool
	frozen   []byte // state of a read-only clone

	root   node
	st     store
	regs   [numRegisters]uint64
	regSet uint32
	cur    cursors
	steps  int

	scratchMsg node
	mergeSeen  []uint32
	stats      Stats
}

// New creates a VM running program (VmProgram bytes) whose state may use at
// most memoryLimitBytes (Perfetto: memory_limit_kb * 1024). The program is
// validated with ParseProgram.
func New(program []byte, memoryLimitBytes int) (*VM, error) {
	if memoryLimitBytes < 0 {
		return nil, fmt.Errorf("protovm: negative memory limit %d", memoryLimitBytes)
	}
	prog, err := ParseProgram(program)
	if err != nil {
		return nil, err
	}
	v := &VM{program: append([]byte(nil), program...), prog: prog}
	v.st.limit = uint64(memoryLimitBytes)
	return v, nil
}

// NewWithState is New with an initial incremental state (serialised bytes,
// typically a TracePacket). Like Perfetto, a state that does not fit in the
// memory limit is dropped and the VM starts empty; initialised reports
// whether the state was kept.
func NewWithState(program []byte, memoryLimitBytes int, state []byte) (v *VM, initialised bool, err error) {
	v, err = New(program, memoryLimitBytes)
	if err != nil {
		return nil, false, err
	}
	c := rwCursor{n: &v.root}
	st := v.rwSetBytes(&c, state)
	v.st.limitHit = false
	return v, st.IsOk(), nil
}

// Program returns the program bytes (a copy is not made; do not modify).
func (v *VM) Program() []byte { return v.program }

// ReadOnly reports whether the VM is a read-only clone.
func (v *VM) ReadOnly() bool { return v.readOnly }

// Stats returns the outcome counters.
func (v *VM) Stats() Stats { return v.stats }

// ApplyPatch runs the program with packet as SRC and the incremental state
// as DST. Changes made before an Error or Abort are kept (never rolled
// back). packet is only read during the call.
func (v *VM) ApplyPatch(packet []byte) Status {
	if v.readOnly {
		v.stats.PatchesAborted++
		return Status{Code: Abort}
	}
	v.cur = cursors{
		src:      roCursor{raw: packet},
		dst:      rwCursor{n: &v.root},
		selected: CursorSrc,
	}
	v.steps = MaxStepsPerPatch
	v.st.limitHit = false
	st := v.runList(v.prog.Instructions)
	v.cur = cursors{}
	if v.st.limitHit {
		v.stats.MemoryLimitHits++
	}
	switch st.Code {
	case Ok:
		v.stats.PatchesApplied++
	case Error:
		v.stats.PatchesFailed++
	default:
		v.stats.PatchesAborted++
	}
	return st
}

// SerializeIncrementalState appends the state, serialised like Perfetto
// does, to dst and returns the extended slice.
func (v *VM) SerializeIncrementalState(dst []byte) []byte {
	if v.readOnly {
		return append(dst, v.frozen...)
	}
	return appendState(dst, &v.root)
}

// MemoryUsage is the program size plus the accounted state memory (for a
// read-only clone: program size plus the frozen state size), like
// Perfetto's Vm::GetMemoryUsageBytes.
func (v *VM) MemoryUsage() int {
	if v.readOnly {
		return len(v.program) + len(v.frozen)
	}
	return len(v.program) + int(v.st.used)
}

// MemoryLimit returns the configured memory limit in bytes.
func (v *VM) MemoryLimit() int { return int(v.st.limit) }

// CloneReadOnly returns a frozen VM holding the program and the state
// serialised now; it rejects every patch with Abort. The clone shares no
// mutable data with v.
func (v *VM) CloneReadOnly() *VM {
	return &VM{
		program:  v.program,
		prog:     v.prog,
		readOnly: true,
		frozen:   v.SerializeIncrementalState(nil),
		st:       store{limit: v.st.limit},
	}
}
