package celfilter

import (
	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/tracepipe/tracepipe/tracefile"
)

// A filter made only of comparisons between a packet field and a literal,
// joined by &&, || and !, is also lowered to a tracefile.Predicate, which
// sinks.Filter evaluates in Go over the decoded packet: the common filters
// then cost a decode and a few comparisons instead of a CEL activation.
// Anything else (functions, arithmetic, uint or double literals, string
// ordering, has()) is evaluated by CEL only. The tree gives the same
// result as CEL for every packet (TestNativeFilterMatchesCEL).

// nativeFields maps a field name to its id and CEL kind ('i', 's', 'b').
var nativeFields = map[string]struct {
	id   tracefile.PredField
	kind byte
}{
	"timestamp": {tracefile.PredTimestamp, 'i'}, "has_timestamp": {tracefile.PredHasTimestamp, 'b'},
	"timestamp_clock_id": {tracefile.PredTimestampClockID, 'i'}, "sequence_id": {tracefile.PredSequenceID, 'i'},
	"size": {tracefile.PredSize, 'i'}, "kind": {tracefile.PredKind, 's'}, "trusted_pid": {tracefile.PredTrustedPID, 'i'},
	"trusted_uid": {tracefile.PredTrustedUID, 'i'}, "machine_id": {tracefile.PredMachineID, 'i'},
	"previous_packet_dropped":  {tracefile.PredPreviousPacketDropped, 'i'},
	"first_packet_on_sequence": {tracefile.PredFirstPacketOnSequence, 'b'}, "sequence_flags": {tracefile.PredSequenceFlags, 'i'},
}

// lowerFilter returns the tree for e, or nil when e is outside the subset.
func lowerFilter(e celast.Expr) *tracefile.Predicate {
	switch e.Kind() {
	case celast.SelectKind:
		if id, kind, ok := fieldOf(e); ok && kind == 'b' {
			return &tracefile.Predicate{Op: tracefile.PredBoolField, Field: id}
		}
		return nil
	case celast.LiteralKind:
		if b, ok := e.AsLiteral().(types.Bool); ok {
			return &tracefile.Predicate{Op: tracefile.PredConst, Bool: bool(b)}
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
		op := tracefile.PredAnd
		if fn == "_||_" {
			op = tracefile.PredOr
		}
		return &tracefile.Predicate{Op: op, A: a, B: b}
	case "!_":
		if len(args) != 1 {
			return nil
		}
		if a := lowerFilter(args[0]); a != nil {
			return &tracefile.Predicate{Op: tracefile.PredNot, A: a}
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

var intOps = map[string]tracefile.PredOp{"_==_": tracefile.PredIntEq, "_!=_": tracefile.PredIntNe, "_<_": tracefile.PredIntLt, "_<=_": tracefile.PredIntLe, "_>_": tracefile.PredIntGt, "_>=_": tracefile.PredIntGe}

func lowerComparison(op string, l, r celast.Expr) *tracefile.Predicate {
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
			return &tracefile.Predicate{Op: intOps[op], Field: id, Int: int64(v)}
		}
	case types.String:
		if kind == 's' {
			n := &tracefile.Predicate{Op: tracefile.PredStrNe, Field: id, Str: string(v)}
			if eq {
				n.Op = tracefile.PredStrEq
			}
			return n
		}
	case types.Bool:
		if kind == 'b' {
			n := &tracefile.Predicate{Op: tracefile.PredBoolNe, Field: id, Bool: bool(v)}
			if eq {
				n.Op = tracefile.PredBoolEq
			}
			return n
		}
	}
	return nil
}

// fieldOf recognises `packet.<field>` (not a has() test).
func fieldOf(e celast.Expr) (id tracefile.PredField, kind byte, ok bool) {
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
