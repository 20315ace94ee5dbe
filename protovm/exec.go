package protovm

// MaxStepsPerPatch bounds the work of one ApplyPatch: every instruction run,
// every loop iteration and every field decoded while scanning costs one step.
// A patch exceeding it aborts ("step budget exceeded"), so a hostile program
// cannot make the VM spin (nested iterations multiply).
const MaxStepsPerPatch = 1 << 22

// numRegisters is the number of VM registers.
const numRegisters = 32

// cursors is the execution context saved and restored by select.
type cursors struct {
	src      roCursor
	dst      rwCursor
	selected int32
	create   bool
	// selDst is the DST node saved by the innermost enclosing select; a del
	// on that very node (unless it is the root) would invalidate it.
	selDst *node
}

func (v *VM) step() bool {
	v.steps--
	return v.steps >= 0
}

func (v *VM) budgetAbort() Status {
	return abortf("step budget exceeded (%d steps per patch)", MaxStepsPerPatch)
}

func (v *VM) runList(list []Instruction) Status {
	for i := range list {
		ins := &list[i]
		st := v.runInstr(ins)
		switch st.Code {
		case Abort:
			return st.wrap("instruction[%d]", i)
		case Error:
			level := AbortSkipCurrentInstructionAndBreakOuter
			if ins.HasAbortLevel {
				level = ins.AbortLevel
			}
			switch level {
			case AbortSkipCurrentInstructionAndBreakOuter:
				return statusError
			case AbortAbort:
				return abortf("instruction[%d]: returned status = error and instruction's abort level = 'abort'", i)
			}
		}
	}
	return statusOk
}

func (v *VM) runInstr(ins *Instruction) Status {
	if !v.step() {
		return v.budgetAbort()
	}
	if ins.Select != nil {
		return v.runSelect(ins).wrap("select")
	}
	switch {
	case ins.RegLoad != nil:
		if st := v.regLoad(ins.RegLoad); !st.IsOk() {
			return st.wrap("reg_load")
		}
	case ins.Del:
		if st := v.del(); !st.IsOk() {
			return st.wrap("del")
		}
	case ins.Merge != nil:
		if st := v.merge(ins.Merge); !st.IsOk() {
			return st.wrap("merge")
		}
	case ins.Set:
		if st := v.set(); !st.IsOk() {
			return st.wrap("set")
		}
	default:
		return abortf("Unsupported instruction")
	}
	return v.runList(ins.Nested)
}

func (v *VM) regLoad(r *RegLoad) Status {
	reg := uint8(r.DstRegister)
	if reg >= numRegisters {
		return abortf("Register (id = %d) is out of bounds", reg)
	}
	sel := CursorSrc
	if r.HasCursor {
		sel = r.Cursor
	}
	var val uint64
	var st Status
	if sel == CursorSrc {
		_, val, st = v.cur.src.getScalar()
	} else {
		val, st = v.rwGetScalar(&v.cur.dst)
	}
	if !st.IsOk() {
		return st
	}
	v.regs[reg] = val
	v.regSet |= 1 << reg
	return statusOk
}

func (v *VM) del() Status {
	d := &v.cur.dst
	if d.n != nil && d.parent != nil && d.n == v.cur.selDst {
		return abortf("del would invalidate a cursor saved by an enclosing select")
	}
	return v.rwDelete(d)
}

func (v *VM) merge(m *Merge) Status {
	if !v.cur.src.isBytes() {
		return abortf("Attempted MERGE operation but src cursor has incompatible data type")
	}
	return v.rwMerge(&v.cur.dst, v.cur.src.bytes(), m.SkipSubmessages, m.DelIfSrcEmpty)
}

func (v *VM) set() Status {
	src := &v.cur.src
	if src.isScalar() {
		return v.rwSetScalar(&v.cur.dst, src.f.wire, src.f.val)
	}
	if src.isBytes() {
		return v.rwSetBytes(&v.cur.dst, src.bytes())
	}
	return abortf("Attempted SET operation but src cursor has no valid data")
}

func (v *VM) runSelect(ins *Instruction) Status {
	saved := v.cur
	s := ins.Select
	v.cur.selected = CursorSrc
	if s.HasCursor {
		v.cur.selected = s.Cursor
	}
	v.cur.create = s.CreateIfNotExist
	if v.cur.selected == CursorSrc && v.cur.create {
		return abortf("incompatible params: src cursor (read only) + create_if_not_exist")
	}
	v.cur.selDst = saved.dst.n
	st := v.selectRec(ins, 0)
	v.cur = saved
	return st
}

func (v *VM) selectRec(ins *Instruction, i int) Status {
	path := ins.Select.Path
	if i >= len(path) {
		return v.runList(ins.Nested)
	}
	comp := &path[i]
	var next *PathComponent
	if i+1 < len(path) {
		next = &path[i+1]
	}
	if !comp.HasFieldID {
		return abortf("Invalid path. Expected path component with field_id.")
	}
	id := comp.FieldID
	if comp.IsRepeated {
		return v.foreach(ins, i, id)
	}
	if next != nil && next.HasArrayIndex {
		var st Status
		if v.cur.selected == CursorSrc {
			st = v.roEnterIndex(&v.cur.src, id, next.ArrayIndex)
		} else {
			st = v.rwEnterIndex(&v.cur.dst, id, next.ArrayIndex)
		}
		if !st.IsOk() {
			return st.wrap("enter indexed repeated field")
		}
		st = v.selectRec(ins, i+2)
		if st.Code == Abort {
			st = st.wrap("repeated field (id = %d, index = %d)", int32(id), int32(next.ArrayIndex))
		}
		return st
	}
	if next != nil && next.HasMapKeyFieldID {
		if !next.HasRegisterToMatch {
			return abortf("enter mapped repeated field: expected field 'register_to_match'")
		}
		reg := uint8(next.RegisterToMatch)
		if reg >= numRegisters {
			return abortf("Register (id = %d) is out of bounds", reg).wrap("enter mapped repeated field")
		}
		if v.regSet&(1<<reg) == 0 {
			return abortf("Register (id = %d) is not initialized)", reg).wrap("enter mapped repeated field")
		}
		key := v.regs[reg]
		if st := v.enterByKey(id, next.MapKeyFieldID, uint64(uint32(key))); !st.IsOk() {
			return st.wrap("enter mapped repeated field")
		}
		st := v.selectRec(ins, i+2)
		if st.Code == Abort {
			st = st.wrap("mapped repeated field (id = %d, key = %d)", int32(id), int32(key))
		}
		return st
	}
	var st Status
	if v.cur.selected == CursorSrc {
		st = v.roEnterField(&v.cur.src, id)
	} else {
		has, hst := v.hasField(&v.cur.dst, id)
		switch {
		case !hst.IsOk():
			st = hst
		case !has && !v.cur.create:
			st = statusError
		default:
			st = v.rwEnterField(&v.cur.dst, id)
		}
	}
	if st.Code == Abort {
		return st.wrap("enter field (id = %d)", int32(id))
	}
	if st.Code == Error {
		return st
	}
	return v.selectRec(ins, i+1)
}

func (v *VM) enterByKey(id, keyField uint32, key uint64) Status {
	if v.cur.selected == CursorSrc {
		return abortf("Mapped repeated fields are currently supported only in RwProto")
	}
	has, st := v.hasField(&v.cur.dst, id)
	if !st.IsOk() {
		return st
	}
	if !has && !v.cur.create {
		return statusError
	}
	return v.rwEnterKey(&v.cur.dst, id, keyField, key)
}

func (v *VM) foreach(ins *Instruction, i int, id uint32) Status {
	switch v.cur.selected {
	case CursorSrc:
		data, st := v.cur.src.lenData()
		if !st.IsOk() {
			return st.wrap("iterate repeated field (id = %d)", int32(id))
		}
		idx := 0
		w := v.walk(data)
		for w.next() {
			if w.f.id != id {
				continue
			}
			v.cur.src = roCursor{isField: true, f: w.f}
			if st := v.selectRec(ins, i+1); !st.IsOk() {
				if st.Code == Abort {
					st = st.wrap("repeated field (id = %d, index = %d)", int32(id), idx)
				}
				return st
			}
			idx++
		}
		return w.st
	case CursorDst:
		d := &v.cur.dst
		if d.n == nil {
			return invalidCursor().wrap("iterate repeated field (id = %d)", int32(id))
		}
		if st := v.toMessage(d.n); !st.IsOk() {
			return st.wrap("iterate repeated field (id = %d)", int32(id))
		}
		rep := d.n.get(uint64(id))
		if rep == nil {
			return statusOk
		}
		if st := v.toIndexed(rep); !st.IsOk() {
			return st.wrap("iterate repeated field (id = %d)", int32(id))
		}
		for idx := 0; idx < len(rep.ents); idx++ {
			if !v.step() {
				return v.budgetAbort()
			}
			v.cur.dst = rwCursor{n: rep.ents[idx].n}
			if st := v.selectRec(ins, i+1); !st.IsOk() {
				if st.Code == Abort {
					st = st.wrap("repeated field (id = %d, index = %d)", int32(id), idx)
				}
				return st
			}
		}
		return statusOk
	}
	return abortf("Iteration over selected cursor (%d) is not supported. Should be either SRC or DST cursor.", v.cur.selected)
}
