package protovm

import (
	"fmt"

	"github.com/tracepipe/tracepipe/internal/wire"

	"google.golang.org/protobuf/encoding/protowire"
)

// Cursor values of VmCursorEnum.
const (
	CursorUnspecified int32 = 0
	CursorSrc         int32 = 1
	CursorDst         int32 = 2
	CursorBoth        int32 = 3
)

// Abort levels of VmInstruction.AbortLevel.
const (
	AbortSkipCurrentInstruction              int32 = 1
	AbortSkipCurrentInstructionAndBreakOuter int32 = 2
	AbortAbort                               int32 = 3
)

// Parser bounds for untrusted programs.
const (
	// MaxProgramNesting bounds how deeply instructions may nest.
	MaxProgramNesting = 64
	// MaxProgramInstructions bounds the total instruction count.
	MaxProgramInstructions = 1 << 16
	// MaxPathComponents bounds the length of one select path.
	MaxPathComponents = 1024
)

// Program is a decoded VmProgram (protos/perfetto/protovm/vm_program.proto).
// Optional proto2 fields carry a Has flag so that encoding reproduces
// explicitly set defaults (e.g. create_if_not_exist: false).
type Program struct {
	HasVersion   bool
	Version      uint32
	Instructions []Instruction
}

// Instruction is a VmInstruction. At most one operation is normally set;
// when several are, Select wins, then RegLoad, Del, Merge, Set (Perfetto's
// precedence).
type Instruction struct {
	Select *Select
	// RegLoad is the reg_load operation (field 2).
	RegLoad *RegLoad
	// Merge is the merge operation (field 3).
	Merge *Merge
	// Set is true when the empty VmOpSet (field 4) is present.
	Set bool
	// Del is true when the empty VmOpDel (field 5) is present.
	Del bool
	// HasAbortLevel and AbortLevel are field 6; absent means
	// SKIP_CURRENT_INSTRUCTION_AND_BREAK_OUTER.
	HasAbortLevel bool
	AbortLevel    int32
	// Nested are nested_instructions (field 7).
	Nested []Instruction
}

// Select is VmOpSelect.
type Select struct {
	HasCursor           bool
	Cursor              int32
	Path                []PathComponent
	HasCreateIfNotExist bool
	CreateIfNotExist    bool
}

// PathComponent is VmOpSelect.PathComponent.
type PathComponent struct {
	HasFieldID          bool
	FieldID             uint32
	HasArrayIndex       bool
	ArrayIndex          uint32
	HasMapKeyFieldID    bool
	MapKeyFieldID       uint32
	HasIsRepeated       bool
	IsRepeated          bool
	HasRegisterToMatch  bool
	RegisterToMatch     uint32
	HasStoreForeachIdx  bool
	StoreForeachIdxInto uint32
}

// RegLoad is VmOpRegLoad.
type RegLoad struct {
	HasCursor      bool
	Cursor         int32
	HasDstRegister bool
	DstRegister    uint32
}

// Merge is VmOpMerge.
type Merge struct {
	HasSkipSubmessages bool
	SkipSubmessages    bool
	HasDelIfSrcEmpty   bool
	DelIfSrcEmpty      bool
}

// ProgramError reports where a program failed to parse.
type ProgramError struct {
	// Offset is the byte offset of the offending field in the program.
	Offset int
	// Field names the message and field being decoded.
	Field string
	// Reason says what was wrong.
	Reason string
}

func (e *ProgramError) Error() string {
	return fmt.Sprintf("protovm: program byte %d (%s): %s", e.Offset, e.Field, e.Reason)
}

type progParser struct {
	count int
}

// ParseProgram decodes VmProgram bytes. It is strict about the wire format
// (truncation, wrong wire types on known fields, bounds) and names the byte
// offset and field of the first problem; unknown fields are skipped.
func ParseProgram(b []byte) (*Program, error) {
	p := &progParser{}
	prog := &Program{}
	err := walk(b, 0, "VmProgram", func(num protowire.Number, typ protowire.Type, v []byte, u uint64, off int) error {
		switch num {
		case 1:
			if err := want(typ, protowire.VarintType, off, "VmProgram.version"); err != nil {
				return err
			}
			prog.HasVersion, prog.Version = true, uint32(u)
		case 2:
			if err := want(typ, protowire.BytesType, off, "VmProgram.instructions"); err != nil {
				return err
			}
			ins, err := p.instruction(v, off, 1)
			if err != nil {
				return err
			}
			prog.Instructions = append(prog.Instructions, ins)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return prog, nil
}

// walk iterates the fields of b (located at base in the whole program),
// calling fn with the value: v for length-delimited, u for scalars.
func walk(b []byte, base int, msg string, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64, off int) error) error {
	it := wire.Fields(b)
	for it.Next() {
		f := it.Field()
		vOff := base + f.Off
		if f.Type == protowire.BytesType {
			vOff = base + f.ValOff
		}
		if err := fn(f.Num, f.Type, f.Bytes, f.Varint, vOff); err != nil {
			return err
		}
	}
	if we := it.Malformed(); we != nil {
		if we.Num == 0 {
			return &ProgramError{base + we.Off, msg, "bad tag: " + we.Err.Error()}
		}
		return &ProgramError{base + we.Off, fmt.Sprintf("%s field %d", msg, we.Num), "bad value: " + we.Err.Error()}
	}
	return nil
}

func want(got, exp protowire.Type, off int, name string) error {
	if got != exp {
		return &ProgramError{off, name, fmt.Sprintf("wire type %d, want %d", got, exp)}
	}
	return nil
}

func (p *progParser) instruction(b []byte, base, depth int) (Instruction, error) {
	var ins Instruction
	if depth > MaxProgramNesting {
		return ins, &ProgramError{base, "VmInstruction", fmt.Sprintf("nesting deeper than %d", MaxProgramNesting)}
	}
	p.count++
	if p.count > MaxProgramInstructions {
		return ins, &ProgramError{base, "VmInstruction", fmt.Sprintf("more than %d instructions", MaxProgramInstructions)}
	}
	err := walk(b, base, "VmInstruction", func(num protowire.Number, typ protowire.Type, v []byte, u uint64, off int) error {
		switch num {
		case 1:
			if err := want(typ, protowire.BytesType, off, "VmInstruction.select"); err != nil {
				return err
			}
			s, err := parseSelect(v, off)
			if err != nil {
				return err
			}
			ins.Select = s
		case 2:
			if err := want(typ, protowire.BytesType, off, "VmInstruction.reg_load"); err != nil {
				return err
			}
			r := &RegLoad{}
			err := walk(v, off, "VmOpRegLoad", func(num protowire.Number, typ protowire.Type, _ []byte, u uint64, off int) error {
				switch num {
				case 1:
					if err := want(typ, protowire.VarintType, off, "VmOpRegLoad.cursor"); err != nil {
						return err
					}
					r.HasCursor, r.Cursor = true, int32(u)
				case 2:
					if err := want(typ, protowire.VarintType, off, "VmOpRegLoad.dst_register"); err != nil {
						return err
					}
					r.HasDstRegister, r.DstRegister = true, uint32(u)
				}
				return nil
			})
			if err != nil {
				return err
			}
			ins.RegLoad = r
		case 3:
			if err := want(typ, protowire.BytesType, off, "VmInstruction.merge"); err != nil {
				return err
			}
			m := &Merge{}
			err := walk(v, off, "VmOpMerge", func(num protowire.Number, typ protowire.Type, _ []byte, u uint64, off int) error {
				switch num {
				case 1:
					if err := want(typ, protowire.VarintType, off, "VmOpMerge.skip_submessages"); err != nil {
						return err
					}
					m.HasSkipSubmessages, m.SkipSubmessages = true, u != 0
				case 2:
					if err := want(typ, protowire.VarintType, off, "VmOpMerge.del_if_src_empty"); err != nil {
						return err
					}
					m.HasDelIfSrcEmpty, m.DelIfSrcEmpty = true, u != 0
				}
				return nil
			})
			if err != nil {
				return err
			}
			ins.Merge = m
		case 4:
			if err := want(typ, protowire.BytesType, off, "VmInstruction.set"); err != nil {
				return err
			}
			ins.Set = true
		case 5:
			if err := want(typ, protowire.BytesType, off, "VmInstruction.del"); err != nil {
				return err
			}
			ins.Del = true
		case 6:
			if err := want(typ, protowire.VarintType, off, "VmInstruction.abort_level"); err != nil {
				return err
			}
			ins.HasAbortLevel, ins.AbortLevel = true, int32(u)
		case 7:
			if err := want(typ, protowire.BytesType, off, "VmInstruction.nested_instructions"); err != nil {
				return err
			}
			n, err := p.instruction(v, off, depth+1)
			if err != nil {
				return err
			}
			ins.Nested = append(ins.Nested, n)
		}
		return nil
	})
	return ins, err
}

func parseSelect(b []byte, base int) (*Select, error) {
	s := &Select{}
	err := walk(b, base, "VmOpSelect", func(num protowire.Number, typ protowire.Type, v []byte, u uint64, off int) error {
		switch num {
		case 1:
			if err := want(typ, protowire.VarintType, off, "VmOpSelect.cursor"); err != nil {
				return err
			}
			s.HasCursor, s.Cursor = true, int32(u)
		case 2:
			if err := want(typ, protowire.BytesType, off, "VmOpSelect.relative_path"); err != nil {
				return err
			}
			if len(s.Path) >= MaxPathComponents {
				return &ProgramError{off, "VmOpSelect.relative_path", fmt.Sprintf("more than %d components", MaxPathComponents)}
			}
			var c PathComponent
			err := walk(v, off, "PathComponent", func(num protowire.Number, typ protowire.Type, _ []byte, u uint64, off int) error {
				if num < 1 || num > 7 || num == 4 {
					return nil
				}
				if err := want(typ, protowire.VarintType, off, fmt.Sprintf("PathComponent field %d", num)); err != nil {
					return err
				}
				switch num {
				case 1:
					c.HasFieldID, c.FieldID = true, uint32(u)
				case 2:
					c.HasArrayIndex, c.ArrayIndex = true, uint32(u)
				case 3:
					c.HasMapKeyFieldID, c.MapKeyFieldID = true, uint32(u)
				case 5:
					c.HasIsRepeated, c.IsRepeated = true, u != 0
				case 6:
					c.HasRegisterToMatch, c.RegisterToMatch = true, uint32(u)
				case 7:
					c.HasStoreForeachIdx, c.StoreForeachIdxInto = true, uint32(u)
				}
				return nil
			})
			if err != nil {
				return err
			}
			s.Path = append(s.Path, c)
		case 3:
			if err := want(typ, protowire.VarintType, off, "VmOpSelect.create_if_not_exist"); err != nil {
				return err
			}
			s.HasCreateIfNotExist, s.CreateIfNotExist = true, u != 0
		}
		return nil
	})
	return s, err
}
