package celfilter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tracepipe/tracepipe/internal/names"

	celast "cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"

	"github.com/tracepipe/tracepipe/tracefile"
)

// A filter that compares packet.kind with a name no packet can have
// compiles and type-checks, yet matches nothing (`packet.kind ==
// "trackevent"` drops every packet). checkKindLiterals refuses such a
// literal at construction, with the closest known name.

// checkKindLiterals returns an error for the first string literal compared
// with packet.kind (==, !=, in a list) that is not a kind a packet can
// have: a name tracefile knows, "field_<n>" for an unknown field, or "".
func checkKindLiterals(e celast.Expr) error {
	var bad []string
	celast.PreOrderVisit(e, celast.NewExprVisitor(func(x celast.Expr) {
		if x.Kind() != celast.CallKind {
			return
		}
		call := x.AsCall()
		args := call.Args()
		if len(args) != 2 {
			return
		}
		var lits []celast.Expr
		switch call.FunctionName() {
		case "_==_", "_!=_":
			if isKindField(args[0]) {
				lits = append(lits, args[1])
			} else if isKindField(args[1]) {
				lits = append(lits, args[0])
			}
		case "@in":
			if isKindField(args[0]) && args[1].Kind() == celast.ListKind {
				lits = args[1].AsList().Elements()
			}
		}
		for _, l := range lits {
			if l.Kind() != celast.LiteralKind {
				continue
			}
			if s, ok := l.AsLiteral().(types.String); ok && !knownKind(string(s)) {
				bad = append(bad, string(s))
			}
		}
	}))
	if len(bad) == 0 {
		return nil
	}
	k := bad[0]
	if s := closestKind(k); s != "" {
		return fmt.Errorf("packet.kind is never %q (did you mean %q?)", k, s)
	}
	return fmt.Errorf("packet.kind is never %q; kinds are %s, or \"field_<n>\" for a field tracefile does not name",
		k, strings.Join(tracefile.PacketKinds(), ", "))
}

// isKindField recognises `packet.kind`.
func isKindField(e celast.Expr) bool {
	id, _, ok := fieldOf(e)
	return ok && id == tracefile.PredKind
}

// knownKind reports whether a packet's kind can be s.
func knownKind(s string) bool {
	if s == "" || slices.Contains(tracefile.PacketKinds(), s) {
		return true
	}
	n, ok := strings.CutPrefix(s, "field_")
	if !ok {
		return false
	}
	num, err := strconv.Atoi(n)
	return err == nil && num > 0 && strconv.Itoa(num) == n && tracefile.PacketFieldName(int32(num)) == s
}

// closestKind returns the known kind nearest to s (case and '_' ignored
// first, then an edit distance of at most 3), or "".
func closestKind(s string) string {
	norm := func(x string) string { return strings.ReplaceAll(strings.ToLower(x), "_", "") }
	best, bestD := "", 4
	for _, k := range tracefile.PacketKinds() {
		if norm(k) == norm(s) {
			return k
		}
		if d := names.EditDistance(strings.ToLower(s), k, bestD); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}
