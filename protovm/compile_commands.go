package protovm

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// This file lowers the high-level commands (Perfetto's CompileConfig) into
// VM instructions, following protovm_compiler's rules.

// scope is a place where instructions are emitted: either the program's
// list or a nested list of the last emitted select.
type emitter struct {
	out *[]Instruction
}

func (e emitter) add(ins Instruction) emitter {
	*e.out = append(*e.out, ins)
	return emitter{out: &(*e.out)[len(*e.out)-1].Nested}
}

// resolvedPath is a path resolved against a message type.
type resolvedPath struct {
	ids      []uint32
	repeated []bool
	typ      protoreflect.MessageDescriptor
	last     protoreflect.FieldDescriptor
}

func (c *compiler) resolvePath(path []yamlPath, md protoreflect.MessageDescriptor, where string) (resolvedPath, error) {
	r := resolvedPath{typ: md}
	for i := range path {
		p := &path[i]
		pw := fmt.Sprintf("%s[%d]", where, i)
		if !p.hasField || p.index != nil || p.mapKey != nil || p.register != nil {
			return r, &CompileError{pw, "command paths hold field names or numbers only"}
		}
		num, fd, err := c.resolveField(p, r.typ, pw)
		if err != nil {
			return r, err
		}
		rep := fd != nil && fd.Cardinality() == protoreflect.Repeated
		if p.repeated != nil {
			if fd != nil && *p.repeated && !rep {
				return r, &CompileError{pw, fmt.Sprintf("field %s is not repeated", fd.FullName())}
			}
			rep = *p.repeated
		}
		r.ids = append(r.ids, num)
		r.repeated = append(r.repeated, rep)
		r.typ = childType(fd)
		r.last = fd
	}
	return r, nil
}

func selSrc(p resolvedPath) Instruction {
	s := &Select{}
	for i, id := range p.ids {
		pc := PathComponent{HasFieldID: true, FieldID: id}
		if p.repeated[i] {
			pc.HasIsRepeated, pc.IsRepeated = true, true
		}
		s.Path = append(s.Path, pc)
	}
	return Instruction{Select: s}
}

func selDst(p resolvedPath, create bool) Instruction {
	ins := selSrc(p)
	ins.Select.HasCursor, ins.Select.Cursor = true, CursorDst
	if create {
		ins.Select.HasCreateIfNotExist, ins.Select.CreateIfNotExist = true, true
	}
	return ins
}

// emitPair emits SEL_SRC(src) → SEL_DST(dst, create) (skipping empty paths)
// and returns the emitter for the innermost scope.
func emitPair(e emitter, src, dst resolvedPath, create bool) emitter {
	if len(src.ids) > 0 {
		e = e.add(selSrc(src))
	}
	if len(dst.ids) > 0 {
		e = e.add(selDst(dst, create))
	}
	return e
}

func (c *compiler) command(y *yamlCommand, where string, srcT, dstT protoreflect.MessageDescriptor) ([]Instruction, error) {
	var out []Instruction
	e := emitter{out: &out}
	n := 0
	for _, set := range []bool{y.Set != nil, y.Del != nil, y.Merge != nil, y.EnterScope != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, &CompileError{where, fmt.Sprintf("a command needs exactly one of set, del, merge, enter_scope (has %d)", n)}
	}
	switch {
	case y.Set != nil:
		src, dst, err := c.paths(y.Set.Src, y.Set.Dst, srcT, dstT, where+".set")
		if err != nil {
			return nil, err
		}
		emitPair(e, src, dst, true).add(Instruction{Set: true})
	case y.Del != nil:
		d := y.Del
		src, dst, err := c.paths(d.Src, d.Dst, srcT, dstT, where+".del")
		if err != nil {
			return nil, err
		}
		if d.IfSrcPresent == (d.DstKeyField != nil) {
			return nil, &CompileError{where + ".del", "exactly one of if_src_present and dst_key_field must be given"}
		}
		if d.IfSrcPresent {
			emitPair(e, src, dst, false).add(Instruction{Del: true})
			break
		}
		if len(dst.ids) == 0 {
			return nil, &CompileError{where + ".del.dst", "dst_key_field needs a dst path ending at the repeated field"}
		}
		key, _, err := c.resolveField(d.DstKeyField, dst.typ, where+".del.dst_key_field")
		if err != nil {
			return nil, err
		}
		inner := e
		if len(src.ids) > 0 {
			inner = e.add(selSrc(src))
		}
		inner.add(Instruction{RegLoad: &RegLoad{HasDstRegister: true}})
		inner.add(keyedDst(dst.ids, key, false)).add(Instruction{Del: true})
	case y.Merge != nil:
		m := y.Merge
		src, dst, err := c.paths(m.Src, m.Dst, srcT, dstT, where+".merge")
		if err != nil {
			return nil, err
		}
		if m.Recursive && (src.typ == nil || dst.typ == nil || src.typ.FullName() != dst.typ.FullName()) {
			return nil, &CompileError{where + ".merge", "recursive merge needs descriptors and identical src and dst message types"}
		}
		if m.KeyField == nil {
			inner := emitPair(e, src, dst, true)
			c.emitMerge(inner, dst.typ, m.Recursive, nil)
			break
		}
		if len(dst.ids) == 0 {
			return nil, &CompileError{where + ".merge.dst", "key_field needs a dst path ending at the repeated field"}
		}
		key, _, err := c.resolveField(m.KeyField, dst.typ, where+".merge.key_field")
		if err != nil {
			return nil, err
		}
		inner := e
		if len(src.ids) > 0 {
			inner = e.add(selSrc(src))
		}
		load := Instruction{HasAbortLevel: true, AbortLevel: AbortAbort,
			Select: &Select{Path: []PathComponent{{HasFieldID: true, FieldID: key}}}}
		inner.add(load).add(Instruction{RegLoad: &RegLoad{HasDstRegister: true}})
		c.emitMerge(inner.add(keyedDst(dst.ids, key, true)), dst.typ, m.Recursive, nil)
	case y.EnterScope != nil:
		s := y.EnterScope
		src, dst, err := c.paths(s.Src, s.Dst, srcT, dstT, where+".enter_scope")
		if err != nil {
			return nil, err
		}
		inner := emitPair(e, src, dst, true)
		for i := range s.Commands {
			sub, err := c.command(&s.Commands[i], fmt.Sprintf("%s.enter_scope.commands[%d]", where, i), src.typ, dst.typ)
			if err != nil {
				return nil, err
			}
			*inner.out = append(*inner.out, sub...)
		}
	}
	if y.AbortLevel != nil {
		v, err := y.AbortLevel.resolve(abortNames)
		if err != nil {
			return nil, &CompileError{where + ".abort_level", err.Error()}
		}
		if v != AbortSkipCurrentInstructionAndBreakOuter && len(out) > 0 {
			out[0].HasAbortLevel, out[0].AbortLevel = true, v
		}
	}
	return out, nil
}

func (c *compiler) paths(srcP, dstP []yamlPath, srcT, dstT protoreflect.MessageDescriptor, where string) (resolvedPath, resolvedPath, error) {
	src, err := c.resolvePath(srcP, srcT, where+".src")
	if err != nil {
		return src, src, err
	}
	dst, err := c.resolvePath(dstP, dstT, where+".dst")
	return src, dst, err
}

// keyedDst is select{cursor: DST, [create], path: ids..., {map_key, reg 0}}.
func keyedDst(ids []uint32, key uint32, create bool) Instruction {
	s := &Select{HasCursor: true, Cursor: CursorDst}
	if create {
		s.HasCreateIfNotExist, s.CreateIfNotExist = true, true
	}
	for _, id := range ids {
		s.Path = append(s.Path, PathComponent{HasFieldID: true, FieldID: id})
	}
	s.Path = append(s.Path, PathComponent{HasMapKeyFieldID: true, MapKeyFieldID: key, HasRegisterToMatch: true})
	return Instruction{Select: s}
}

// emitMerge emits, in scope e, the recursive sub-merges (one per singular,
// non-deprecated message field of typ, in descriptor order, each with abort
// level SKIP_CURRENT_INSTRUCTION) and then the merge itself. A message type
// already being expanded is not expanded again (recursive types stop).
func (c *compiler) emitMerge(e emitter, typ protoreflect.MessageDescriptor, recursive bool, stack []protoreflect.FullName) {
	if recursive && typ != nil {
		stack = append(stack, typ.FullName())
		fields := typ.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.Cardinality() == protoreflect.Repeated || fd.Message() == nil || isDeprecated(fd) {
				continue
			}
			p := resolvedPath{ids: []uint32{uint32(fd.Number())}, repeated: []bool{false}}
			src := selSrc(p)
			src.HasAbortLevel, src.AbortLevel = true, AbortSkipCurrentInstruction
			inner := e.add(src).add(selDst(p, true))
			sub := fd.Message()
			expanding := false
			for _, n := range stack {
				if n == sub.FullName() {
					expanding = true
				}
			}
			if expanding {
				sub = nil
			}
			c.emitMerge(inner, sub, true, stack)
		}
	}
	m := &Merge{HasDelIfSrcEmpty: true, DelIfSrcEmpty: true}
	if recursive {
		m.HasSkipSubmessages, m.SkipSubmessages = true, true
	}
	e.add(Instruction{Merge: m})
}

func isDeprecated(fd protoreflect.FieldDescriptor) bool {
	opts, ok := fd.Options().(interface{ GetDeprecated() bool })
	return ok && opts.GetDeprecated()
}
