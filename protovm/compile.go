package protovm

import (
	"bytes"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// LoadDescriptorSet parses a binary FileDescriptorSet (protoc
// --descriptor_set_out --include_imports) into a registry for Compile.
func LoadDescriptorSet(b []byte) (*protoregistry.Files, error) {
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("protovm: descriptor set: %w", err)
	}
	files, err := protodesc.NewFiles(&set)
	if err != nil {
		return nil, fmt.Errorf("protovm: descriptor set: %w", err)
	}
	return files, nil
}

// CompileError names the instruction or command and the field at fault.
type CompileError struct {
	// Where is the path of the item, e.g. "commands[1].merge.src[2]".
	Where string
	// Reason says what was wrong.
	Reason string
}

func (e *CompileError) Error() string { return "protovm compile: " + e.Where + ": " + e.Reason }

// Compile turns a YAML program description into VmProgram bytes. files
// resolves field names (nil: only field numbers may be used). The format is
// documented in README.md: an optional `version`, an optional
// `root_message` (required for names), low-level `instructions` emitted
// verbatim, then high-level `commands` lowered like Perfetto's
// protovm_compiler (set, del, merge, enter_scope).
func Compile(src []byte, files *protoregistry.Files) ([]byte, error) {
	p, err := CompileProgram(src, files)
	if err != nil {
		return nil, err
	}
	return p.Marshal(), nil
}

// CompileProgram is Compile returning the decoded Program.
func CompileProgram(src []byte, files *protoregistry.Files) (*Program, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	var doc yamlProgram
	if err := dec.Decode(&doc); err != nil {
		return nil, &CompileError{"document", err.Error()}
	}
	if err := checkServes(doc.Serves); err != nil {
		return nil, err
	}
	c := &compiler{files: files}
	var root protoreflect.MessageDescriptor
	if doc.RootMessage != "" {
		if files == nil {
			return nil, &CompileError{"root_message", "names need descriptors (-d)"}
		}
		d, err := files.FindDescriptorByName(protoreflect.FullName(strings.TrimPrefix(doc.RootMessage, ".")))
		if err != nil {
			return nil, &CompileError{"root_message", fmt.Sprintf("message %q not found: %v", doc.RootMessage, err)}
		}
		md, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			return nil, &CompileError{"root_message", fmt.Sprintf("%q is not a message", doc.RootMessage)}
		}
		root = md
	}
	prog := &Program{}
	if doc.Version != nil {
		prog.HasVersion, prog.Version = true, *doc.Version
	}
	for i := range doc.Instructions {
		ins, err := c.instruction(&doc.Instructions[i], fmt.Sprintf("instructions[%d]", i), root, root, 1)
		if err != nil {
			return nil, err
		}
		prog.Instructions = append(prog.Instructions, ins)
	}
	for i := range doc.Commands {
		out, err := c.command(&doc.Commands[i], fmt.Sprintf("commands[%d]", i), root, root)
		if err != nil {
			return nil, err
		}
		prog.Instructions = append(prog.Instructions, out...)
	}
	// The result must be a program our own parser accepts.
	if _, err := ParseProgram(prog.Marshal()); err != nil {
		return nil, &CompileError{"program", err.Error()}
	}
	return prog, nil
}

// What a program serves (the YAML key `serves`): the consumer of its
// state. It is not part of the VmProgram bytes.
const (
	// ServesRestore: tracepipe folds each sequence with the program and
	// writes the state as a sequence restore packet after a loss.
	ServesRestore = "restore"
	// ServesPerfetto: the state goes into a protovms packet for
	// trace_processor, which replaces each packet the program returns Ok
	// for by the state; such a program must fail on event packets.
	ServesPerfetto = "perfetto"
)

func checkServes(v string) error {
	switch v {
	case "", ServesRestore, ServesPerfetto:
		return nil
	}
	return &CompileError{"serves", fmt.Sprintf("%q: want %s or %s", v, ServesRestore, ServesPerfetto)}
}

// Serves returns what a YAML program description declares with its
// `serves` key ("" when absent). Only that key is read; Compile reports
// every other problem.
func Serves(src []byte) (string, error) {
	var doc struct {
		Serves string `yaml:"serves"`
	}
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return "", &CompileError{"document", err.Error()}
	}
	return doc.Serves, checkServes(doc.Serves)
}

type compiler struct {
	files *protoregistry.Files
}

// resolveField finds a path element's field in md (md may be nil when only
// numbers are used). It returns the field number and descriptor (nil when
// unknown).
func (c *compiler) resolveField(p *yamlPath, md protoreflect.MessageDescriptor, where string) (uint32, protoreflect.FieldDescriptor, error) {
	if p.isNum {
		var fd protoreflect.FieldDescriptor
		if md != nil {
			fd = md.Fields().ByNumber(protoreflect.FieldNumber(p.num))
		}
		return p.num, fd, nil
	}
	if md == nil {
		return 0, nil, &CompileError{where, fmt.Sprintf("Failed to lookup field name: %s (no message type known here; give root_message and descriptors, or a field number)", p.name)}
	}
	fd := md.Fields().ByName(protoreflect.Name(p.name))
	if fd == nil {
		return 0, nil, &CompileError{where, fmt.Sprintf("Failed to lookup field name: %s (in %s)", p.name, md.FullName())}
	}
	return uint32(fd.Number()), fd, nil
}

func childType(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd == nil || fd.Message() == nil || fd.IsMap() {
		return nil
	}
	return fd.Message()
}

func (c *compiler) instruction(y *yamlInstruction, where string, srcT, dstT protoreflect.MessageDescriptor, depth int) (Instruction, error) {
	var ins Instruction
	if depth > MaxProgramNesting {
		return ins, &CompileError{where, fmt.Sprintf("nesting deeper than %d", MaxProgramNesting)}
	}
	ops := 0
	if y.Select != nil {
		ops++
		s := &Select{}
		selected := CursorSrc
		if y.Select.Cursor != nil {
			v, err := y.Select.Cursor.resolve(cursorNames)
			if err != nil {
				return ins, &CompileError{where + ".select.cursor", err.Error()}
			}
			s.HasCursor, s.Cursor, selected = true, v, v
		}
		if y.Select.CreateIfNotExist != nil {
			s.HasCreateIfNotExist, s.CreateIfNotExist = true, *y.Select.CreateIfNotExist
		}
		cur := &srcT
		if selected != CursorSrc {
			cur = &dstT
		}
		for j := range y.Select.Path {
			pe := &y.Select.Path[j]
			pw := fmt.Sprintf("%s.select.path[%d]", where, j)
			var pc PathComponent
			if pe.hasField {
				num, fd, err := c.resolveField(pe, *cur, pw)
				if err != nil {
					return ins, err
				}
				pc.HasFieldID, pc.FieldID = true, num
				if pe.repeated != nil {
					pc.HasIsRepeated, pc.IsRepeated = true, *pe.repeated
				}
				*cur = childType(fd)
			}
			if pe.index != nil {
				pc.HasArrayIndex, pc.ArrayIndex = true, *pe.index
			}
			if pe.mapKey != nil {
				num, _, err := c.resolveField(pe.mapKey, *cur, pw+".map_key")
				if err != nil {
					return ins, err
				}
				pc.HasMapKeyFieldID, pc.MapKeyFieldID = true, num
			}
			if pe.register != nil {
				pc.HasRegisterToMatch, pc.RegisterToMatch = true, *pe.register
			}
			s.Path = append(s.Path, pc)
		}
		ins.Select = s
	}
	if y.RegLoad != nil {
		ops++
		r := &RegLoad{}
		if y.RegLoad.Cursor != nil {
			v, err := y.RegLoad.Cursor.resolve(cursorNames)
			if err != nil {
				return ins, &CompileError{where + ".reg_load.cursor", err.Error()}
			}
			r.HasCursor, r.Cursor = true, v
		}
		if y.RegLoad.Register != nil {
			if *y.RegLoad.Register >= numRegisters {
				return ins, &CompileError{where + ".reg_load.register", fmt.Sprintf("register %d out of range 0..%d", *y.RegLoad.Register, numRegisters-1)}
			}
			r.HasDstRegister, r.DstRegister = true, *y.RegLoad.Register
		}
		ins.RegLoad = r
	}
	if y.Merge != nil {
		ops++
		m := &Merge{}
		if y.Merge.SkipSubmessages != nil {
			m.HasSkipSubmessages, m.SkipSubmessages = true, *y.Merge.SkipSubmessages
		}
		if y.Merge.DelIfSrcEmpty != nil {
			m.HasDelIfSrcEmpty, m.DelIfSrcEmpty = true, *y.Merge.DelIfSrcEmpty
		}
		ins.Merge = m
	}
	if y.Set != nil {
		ops++
		ins.Set = true
	}
	if y.Del != nil {
		ops++
		ins.Del = true
	}
	if ops != 1 {
		return ins, &CompileError{where, fmt.Sprintf("an instruction needs exactly one of select, reg_load, merge, set, del (has %d)", ops)}
	}
	if y.AbortLevel != nil {
		v, err := y.AbortLevel.resolve(abortNames)
		if err != nil {
			return ins, &CompileError{where + ".abort_level", err.Error()}
		}
		ins.HasAbortLevel, ins.AbortLevel = true, v
	}
	for j := range y.Nested {
		n, err := c.instruction(&y.Nested[j], fmt.Sprintf("%s.nested[%d]", where, j), srcT, dstT, depth+1)
		if err != nil {
			return ins, err
		}
		ins.Nested = append(ins.Nested, n)
	}
	return ins, nil
}
