package tracefile

// Predicate is one node of a test on a packet's top-level fields: a
// comparison of a field with a literal (Int, Str or Bool), a bool field,
// a constant, or And, Or and Not of its operands A and B.
type Predicate struct {
	Op    PredOp
	Field PredField // for comparisons and bool fields
	Int   int64
	Str   string
	Bool  bool
	A, B  *Predicate
}

// PredOp is what a Predicate node does.
type PredOp byte

// PredField names a PacketInfo field as a Predicate reads it.
type PredField byte

// The operations of a Predicate node.
const (
	PredAnd PredOp = iota + 1
	PredOr
	PredNot
	PredConst // bval
	PredBoolField
	PredIntEq
	PredIntNe
	PredIntLt
	PredIntLe
	PredIntGt
	PredIntGe
	PredStrEq
	PredStrNe
	PredBoolEq
	PredBoolNe
)

// The fields a Predicate reads: PacketInfo's, with Kind for the payload's
// name; as ints, the field's value (0 when absent), as CEL filters see it.
const (
	PredTimestamp PredField = iota + 1
	PredHasTimestamp
	PredTimestampClockID
	PredSequenceID
	PredSize
	PredKind
	PredTrustedPID
	PredTrustedUID
	PredMachineID
	PredPreviousPacketDropped
	PredFirstPacketOnSequence
	PredSequenceFlags
)

// intField reads an int field.
func intField(p *PacketInfo, id PredField) int64 {
	switch id {
	case PredTimestamp:
		return int64(p.Timestamp)
	case PredTimestampClockID:
		return int64(p.TimestampClockID)
	case PredSequenceID:
		return int64(p.SequenceID)
	case PredSize:
		return int64(p.Size)
	case PredTrustedPID:
		return int64(p.TrustedPID)
	case PredTrustedUID:
		return int64(p.TrustedUID)
	case PredMachineID:
		return int64(p.MachineID)
	case PredPreviousPacketDropped:
		return int64(p.PreviousPacketDropped)
	case PredSequenceFlags:
		return int64(p.SequenceFlags)
	}
	panic("tracefile: Predicate: invariant violation: int field id")
}

func boolField(p *PacketInfo, id PredField) bool {
	if id == PredHasTimestamp {
		return p.HasTimestamp
	}
	return p.FirstPacketOnSequence
}

// Eval evaluates the tree on a decoded packet. It is a plain tree walked
// by one method, without closures, so that the packet stays on the
// caller's stack.
func (n *Predicate) Eval(p *PacketInfo) bool {
	switch n.Op {
	case PredAnd:
		return n.A.Eval(p) && n.B.Eval(p)
	case PredOr:
		return n.A.Eval(p) || n.B.Eval(p)
	case PredNot:
		return !n.A.Eval(p)
	case PredConst:
		return n.Bool
	case PredBoolField:
		return boolField(p, n.Field)
	case PredIntEq:
		return intField(p, n.Field) == n.Int
	case PredIntNe:
		return intField(p, n.Field) != n.Int
	case PredIntLt:
		return intField(p, n.Field) < n.Int
	case PredIntLe:
		return intField(p, n.Field) <= n.Int
	case PredIntGt:
		return intField(p, n.Field) > n.Int
	case PredIntGe:
		return intField(p, n.Field) >= n.Int
	case PredStrEq:
		return p.Kind() == n.Str
	case PredStrNe:
		return p.Kind() != n.Str
	case PredBoolEq:
		return boolField(p, n.Field) == n.Bool
	case PredBoolNe:
		return boolField(p, n.Field) != n.Bool
	}
	panic("tracefile: Predicate: invariant violation: op")
}
