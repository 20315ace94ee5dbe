package protovm

import (
	"github.com/tracepipe/tracepipe/internal/wire"
)

// Marshal encodes the program as VmProgram bytes: fields in field-number
// order; an optional field is written when its Has flag is set or its value
// is not the zero value.
func (p *Program) Marshal() []byte {
	var b []byte
	if p.HasVersion || p.Version != 0 {
		b = wire.AppendVarint(b, 1, uint64(p.Version))
	}
	for i := range p.Instructions {
		b = wire.AppendBytes(b, 2, p.Instructions[i].marshal(nil))
	}
	return b
}

func appendBool(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// enumVarint encodes an int32 enum like protobuf does (negative values are
// sign-extended to 64 bits).
func enumVarint(v int32) uint64 { return uint64(int64(v)) }

func (ins *Instruction) marshal(b []byte) []byte {
	if s := ins.Select; s != nil {
		var sb []byte
		if s.HasCursor || s.Cursor != 0 {
			sb = wire.AppendVarint(sb, 1, enumVarint(s.Cursor))
		}
		for i := range s.Path {
			sb = wire.AppendBytes(sb, 2, s.Path[i].marshal())
		}
		if s.HasCreateIfNotExist || s.CreateIfNotExist {
			sb = wire.AppendVarint(sb, 3, appendBool(s.CreateIfNotExist))
		}
		b = wire.AppendBytes(b, 1, sb)
	}
	if r := ins.RegLoad; r != nil {
		var rb []byte
		if r.HasCursor || r.Cursor != 0 {
			rb = wire.AppendVarint(rb, 1, enumVarint(r.Cursor))
		}
		if r.HasDstRegister || r.DstRegister != 0 {
			rb = wire.AppendVarint(rb, 2, uint64(r.DstRegister))
		}
		b = wire.AppendBytes(b, 2, rb)
	}
	if m := ins.Merge; m != nil {
		var mb []byte
		if m.HasSkipSubmessages || m.SkipSubmessages {
			mb = wire.AppendVarint(mb, 1, appendBool(m.SkipSubmessages))
		}
		if m.HasDelIfSrcEmpty || m.DelIfSrcEmpty {
			mb = wire.AppendVarint(mb, 2, appendBool(m.DelIfSrcEmpty))
		}
		b = wire.AppendBytes(b, 3, mb)
	}
	if ins.Set {
		b = wire.AppendBytes(b, 4, nil)
	}
	if ins.Del {
		b = wire.AppendBytes(b, 5, nil)
	}
	if ins.HasAbortLevel || ins.AbortLevel != 0 {
		b = wire.AppendVarint(b, 6, enumVarint(ins.AbortLevel))
	}
	for i := range ins.Nested {
		b = wire.AppendBytes(b, 7, ins.Nested[i].marshal(nil))
	}
	return b
}

func (c *PathComponent) marshal() []byte {
	var b []byte
	if c.HasFieldID || c.FieldID != 0 {
		b = wire.AppendVarint(b, 1, uint64(c.FieldID))
	}
	if c.HasArrayIndex || c.ArrayIndex != 0 {
		b = wire.AppendVarint(b, 2, uint64(c.ArrayIndex))
	}
	if c.HasMapKeyFieldID || c.MapKeyFieldID != 0 {
		b = wire.AppendVarint(b, 3, uint64(c.MapKeyFieldID))
	}
	if c.HasIsRepeated || c.IsRepeated {
		b = wire.AppendVarint(b, 5, appendBool(c.IsRepeated))
	}
	if c.HasRegisterToMatch || c.RegisterToMatch != 0 {
		b = wire.AppendVarint(b, 6, uint64(c.RegisterToMatch))
	}
	if c.HasStoreForeachIdx || c.StoreForeachIdxInto != 0 {
		b = wire.AppendVarint(b, 7, uint64(c.StoreForeachIdxInto))
	}
	return b
}
