package celfilter

import (
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/tracepipe/tracepipe/tracefile"
)

// A filter made only of comparisons between a packet field and a literal,
// joined by &&, || and !, is also lowered to a small tree evaluated in Go
// over the decoded packet: the common filters then cost a decode and a few
// comparisons instead of a CEL activation. Anything else (functions,
// arithmetic, uint or double literals, string ordering, has()) is
// evaluated by CEL only. The tree gives the same result as CEL for every
// packet (TestNativeFilterMatchesCEL). It is a plain tree walked by one
// method, without closures, so the decoded packet stays on the stack.

// nativeNode is one node of a lowered filter.
type nativeNode struct {
	op    byte // see the op* constants
	field byte // fieldID, for comparisons and bool fields
	ival  int64
	sval  string
	bval  bool
	a, b  *nativeNode
}

const (
	opAnd = iota + 1
	opOr
	opNot
	opConst // bval
	opBoolField
	opIntEq
	opIntNe
	opIntLt
	opIntLe
	opIntGt
	opIntGe
	opStrEq
	opStrNe
	opBoolEq
	opBoolNe
)

// Field ids of the `packet` fields (see Packet).
const (
	fTimestamp = iota + 1
	fHasTimestamp
	fTimestampClockID
	fSequenceID
	fSize
	fKind
	fTrustedPID
	fTrustedUID
	fMachineID
	fPreviousPacketDropped
	fFirstPacketOnSequence
	fSequenceFlags
)

// nativeFields maps a field name to its id and CEL kind ('i', 's', 'b').
var nativeFields = map[string]struct {
	id   byte
	kind byte
}{
	"timestamp": {fTimestamp, 'i'}, "has_timestamp": {fHasTimestamp, 'b'},
	"timestamp_clock_id": {fTimestampClockID, 'i'}, "sequence_id": {fSequenceID, 'i'},
	"size": {fSize, 'i'}, "kind": {fKind, 's'}, "trusted_pid": {fTrustedPID, 'i'},
	"trusted_uid": {fTrustedUID, 'i'}, "machine_id": {fMachineID, 'i'},
	"previous_packet_dropped":  {fPreviousPacketDropped, 'i'},
	"first_packet_on_sequence": {fFirstPacketOnSequence, 'b'}, "sequence_flags": {fSequenceFlags, 'i'},
}

// intField reads an int field exactly as MatchInfo fills Packet.
func intField(p *tracefile.PacketInfo, id byte) int64 {
	switch id {
	case fTimestamp:
		return int64(p.Timestamp)
	case fTimestampClockID:
		return int64(p.TimestampClockID)
	case fSequenceID:
		return int64(p.SequenceID)
	case fSize:
		return int64(p.Size)
	case fTrustedPID:
		return int64(p.TrustedPID)
	case fTrustedUID:
		return int64(p.TrustedUID)
	case fMachineID:
		return int64(p.MachineID)
	case fPreviousPacketDropped:
		return int64(p.PreviousPacketDropped)
	case fSequenceFlags:
		return int64(p.SequenceFlags)
	}
	panic("sinks: native filter: invariant violation: int field id")
}

func boolField(p *tracefile.PacketInfo, id byte) bool {
	if id == fHasTimestamp {
		return p.HasTimestamp
	}
	return p.FirstPacketOnSequence
}

// eval evaluates the tree on a decoded packet.
func (n *nativeNode) eval(p *tracefile.PacketInfo) bool {
	switch n.op {
	case opAnd:
		return n.a.eval(p) && n.b.eval(p)
	case opOr:
		return n.a.eval(p) || n.b.eval(p)
	case opNot:
		return !n.a.eval(p)
	case opConst:
		return n.bval
	case opBoolField:
		return boolField(p, n.field)
	case opIntEq:
		return intField(p, n.field) == n.ival
	case opIntNe:
		return intField(p, n.field) != n.ival
	case opIntLt:
		return intField(p, n.field) < n.ival
	case opIntLe:
		return intField(p, n.field) <= n.ival
	case opIntGt:
		return intField(p, n.field) > n.ival
	case opIntGe:
		return intField(p, n.field) >= n.ival
	case opStrEq:
		return p.Kind() == n.sval
	case opStrNe:
		return p.Kind() != n.sval
	case opBoolEq:
		return boolField(p, n.field) == n.bval
	case opBoolNe:
		return boolField(p, n.field) != n.bval
	}
	panic("sinks: native filter: invariant violation: op")
}

// lowerFilter returns the tree for e, or nil when e is outside the subset.
func lowerFilter(e celast.Expr) *nativeNode {
	switch e.Kind() {
	case celast.SelectKind:
		if id, kind, ok := fieldOf(e); ok && kind == 'b' {
			return &nativeNode{op: opBoolField, field: id}
		}
		return nil
	case celast.LiteralKind:
		if b, ok := e.AsLiteral().(types.Bool); ok {
			return &nativeNode{op: opConst, bval: bool(b)}
		}
		return nil
	case celast.CallKind:
	default:
		return nil
	}
	call := e.AsCall()
	if call.IsMemberFunction() {
		return nil
	}
	args := call.Args()
	switch fn := call.FunctionName(); fn {
	case "_&&_", "_||_":
		if len(args) != 2 {
			return nil
		}
		a, b := lowerFilter(args[0]), lowerFilter(args[1])
		if a == nil || b == nil {
			return nil
		}
		op := byte(opAnd)
		if fn == "_||_" {
			op = opOr
		}
		return &nativeNode{op: op, a: a, b: b}
	case "!_":
		if len(args) != 1 {
			return nil
		}
		if a := lowerFilter(args[0]); a != nil {
			return &nativeNode{op: opNot, a: a}
		}
		return nil
	case "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_":
		if len(args) != 2 {
			return nil
		}
		return lowerComparison(fn, args[0], args[1])
	}
	return nil
}

// mirror is the operator with its operands swapped (3 < x is x > 3).
var mirror = map[string]string{"_==_": "_==_", "_!=_": "_!=_", "_<_": "_>_", "_<=_": "_>=_", "_>_": "_<_", "_>=_": "_<=_"}

var intOps = map[string]byte{"_==_": opIntEq, "_!=_": opIntNe, "_<_": opIntLt, "_<=_": opIntLe, "_>_": opIntGt, "_>=_": opIntGe}

func lowerComparison(op string, l, r celast.Expr) *nativeNode {
	id, kind, ok := fieldOf(l)
	lit := r
	if !ok {
		if id, kind, ok = fieldOf(r); !ok {
			return nil
		}
		lit, op = l, mirror[op]
	}
	if lit.Kind() != celast.LiteralKind {
		return nil
	}
	eq := op == "_==_"
	if !eq && op != "_!=_" && kind != 'i' {
		return nil // only ints are ordered natively
	}
	switch v := lit.AsLiteral().(type) {
	case types.Int:
		if kind == 'i' {
			return &nativeNode{op: intOps[op], field: id, ival: int64(v)}
		}
	case types.String:
		if kind == 's' {
			n := &nativeNode{op: opStrNe, field: id, sval: string(v)}
			if eq {
				n.op = opStrEq
			}
			return n
		}
	case types.Bool:
		if kind == 'b' {
			n := &nativeNode{op: opBoolNe, field: id, bval: bool(v)}
			if eq {
				n.op = opBoolEq
			}
			return n
		}
	}
	return nil
}

// fieldOf recognises `packet.<field>` (not a has() test).
func fieldOf(e celast.Expr) (id, kind byte, ok bool) {
	if e.Kind() != celast.SelectKind {
		return 0, 0, false
	}
	sel := e.AsSelect()
	if sel.IsTestOnly() || sel.Operand().Kind() != celast.IdentKind || sel.Operand().AsIdent() != "packet" {
		return 0, 0, false
	}
	f, ok := nativeFields[sel.FieldName()]
	return f.id, f.kind, ok
}
