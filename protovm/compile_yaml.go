package protovm

import (
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// This file holds the YAML document model of the compiler input; the
// format is described in README.md and in the Compile doc comment.

type yamlProgram struct {
	Serves       string            `yaml:"serves"` // not compiled: see Serves
	Version      *uint32           `yaml:"version"`
	RootMessage  string            `yaml:"root_message"`
	Instructions []yamlInstruction `yaml:"instructions"`
	Commands     []yamlCommand     `yaml:"commands"`
}

type yamlInstruction struct {
	Select     *yamlSelect       `yaml:"select"`
	RegLoad    *yamlRegLoad      `yaml:"reg_load"`
	Merge      *yamlMerge        `yaml:"merge"`
	Set        *struct{}         `yaml:"set"`
	Del        *struct{}         `yaml:"del"`
	AbortLevel *yamlEnum         `yaml:"abort_level"`
	Nested     []yamlInstruction `yaml:"nested"`
}

type yamlSelect struct {
	Cursor           *yamlEnum  `yaml:"cursor"`
	Path             []yamlPath `yaml:"path"`
	CreateIfNotExist *bool      `yaml:"create_if_not_exist"`
}

type yamlRegLoad struct {
	Cursor   *yamlEnum `yaml:"cursor"`
	Register *uint32   `yaml:"register"`
}

type yamlMerge struct {
	SkipSubmessages *bool `yaml:"skip_submessages"`
	DelIfSrcEmpty   *bool `yaml:"del_if_src_empty"`
}

type yamlCommand struct {
	Set        *yamlSetCmd   `yaml:"set"`
	Del        *yamlDelCmd   `yaml:"del"`
	Merge      *yamlMergeCmd `yaml:"merge"`
	EnterScope *yamlScopeCmd `yaml:"enter_scope"`
	AbortLevel *yamlEnum     `yaml:"abort_level"`
}

type yamlSetCmd struct {
	Src []yamlPath `yaml:"src"`
	Dst []yamlPath `yaml:"dst"`
}

type yamlDelCmd struct {
	Src          []yamlPath `yaml:"src"`
	Dst          []yamlPath `yaml:"dst"`
	IfSrcPresent bool       `yaml:"if_src_present"`
	DstKeyField  *yamlPath  `yaml:"dst_key_field"`
}

type yamlMergeCmd struct {
	Src       []yamlPath `yaml:"src"`
	Dst       []yamlPath `yaml:"dst"`
	Recursive bool       `yaml:"recursive"`
	KeyField  *yamlPath  `yaml:"key_field"`
}

type yamlScopeCmd struct {
	Src      []yamlPath    `yaml:"src"`
	Dst      []yamlPath    `yaml:"dst"`
	Commands []yamlCommand `yaml:"commands"`
}

// yamlEnum is an enum given by name or number.
type yamlEnum struct {
	name  string
	num   int32
	isNum bool
}

func (e *yamlEnum) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected an enum name or number", n.Line)
	}
	if v, err := strconv.ParseInt(n.Value, 0, 32); err == nil {
		e.num, e.isNum = int32(v), true
		return nil
	}
	e.name = n.Value
	return nil
}

func (e *yamlEnum) resolve(names map[string]int32) (int32, error) {
	if e.isNum {
		return e.num, nil
	}
	v, ok := names[strings.ToUpper(e.name)]
	if !ok {
		return 0, fmt.Errorf("unknown value %q", e.name)
	}
	return v, nil
}

var cursorNames = map[string]int32{
	"UNSPECIFIED": CursorUnspecified, "VM_CURSOR_UNSPECIFIED": CursorUnspecified,
	"SRC": CursorSrc, "VM_CURSOR_SRC": CursorSrc,
	"DST": CursorDst, "VM_CURSOR_DST": CursorDst,
	"BOTH": CursorBoth, "VM_CURSOR_BOTH": CursorBoth,
}

var abortNames = map[string]int32{
	"SKIP_CURRENT_INSTRUCTION": AbortSkipCurrentInstruction, "SKIP_CURRENT_COMMAND": AbortSkipCurrentInstruction,
	"SKIP_CURRENT_INSTRUCTION_AND_BREAK_OUTER": AbortSkipCurrentInstructionAndBreakOuter,
	"SKIP_CURRENT_COMMAND_AND_BREAK_OUTER":     AbortSkipCurrentInstructionAndBreakOuter,
	"ABORT":                                    AbortAbort,
}

// yamlPath is one path element: a field (number or name, "[]" suffix =
// iterate), or a mapping {field, repeated} / {index} / {map_key, register}.
type yamlPath struct {
	line     int
	name     string
	num      uint32
	isNum    bool
	hasField bool
	repeated *bool
	index    *uint32
	mapKey   *yamlPath
	register *uint32
}

func (p *yamlPath) setField(s string) error {
	if rest, ok := strings.CutSuffix(s, "[]"); ok {
		t := true
		p.repeated = &t
		s = rest
	}
	if s == "" {
		return fmt.Errorf("line %d: empty field name", p.line)
	}
	p.hasField = true
	if v, err := strconv.ParseUint(s, 10, 32); err == nil {
		p.num, p.isNum = uint32(v), true
		return nil
	}
	p.name = s
	return nil
}

func (p *yamlPath) UnmarshalYAML(n *yaml.Node) error {
	p.line = n.Line
	switch n.Kind {
	case yaml.ScalarNode:
		return p.setField(n.Value)
	case yaml.MappingNode:
		var m struct {
			Field    *string `yaml:"field"`
			Repeated *bool   `yaml:"repeated"`
			Index    *uint32 `yaml:"index"`
			MapKey   *string `yaml:"map_key"`
			Register *uint32 `yaml:"register"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		if m.Field != nil {
			if err := p.setField(*m.Field); err != nil {
				return err
			}
		}
		if m.Repeated != nil {
			p.repeated = m.Repeated
		}
		p.index = m.Index
		if m.MapKey != nil {
			k := &yamlPath{line: n.Line}
			if err := k.setField(*m.MapKey); err != nil {
				return err
			}
			p.mapKey = k
		}
		p.register = m.Register
		if !p.hasField && p.index == nil && p.mapKey == nil {
			return fmt.Errorf("line %d: path element needs field, index or map_key", n.Line)
		}
		return nil
	}
	return fmt.Errorf("line %d: path element must be a field or a mapping", n.Line)
}

func (p *yamlPath) String() string {
	if p.isNum {
		return strconv.FormatUint(uint64(p.num), 10)
	}
	return p.name
}
