package protovm

import "slices"

// TopLevelSrcFields returns the TracePacket fields a patch must carry at
// its top level for the program to touch anything, when the program lets
// that be known: every top-level instruction is a select on SRC whose
// path starts with a field id. For such a program a patch carrying none of
// the returned fields leaves the state and the registers exactly as they
// were: each top-level select stops at its first path component (a
// missing field is Error, an empty iteration is Ok without running
// anything; a keyed step on SRC aborts before any change). A caller that
// folds many packets may then skip ApplyPatch for them; only the status
// differs (skipped instead of Error/Ok/Abort). ok is false when the
// program has another shape; fields are sorted and unique.
func (p *Program) TopLevelSrcFields() (fields []uint32, ok bool) {
	for i := range p.Instructions {
		s := p.Instructions[i].Select
		if s == nil || (s.HasCursor && s.Cursor != CursorSrc) || len(s.Path) == 0 || !s.Path[0].HasFieldID {
			return nil, false
		}
		fields = append(fields, s.Path[0].FieldID)
	}
	slices.Sort(fields)
	return slices.Compact(fields), true
}
