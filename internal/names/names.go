// Package names owns the one rule for the names a user gives sessions
// and triggers (unique_session_name, triggers[].name, and the names a
// control request or an Alertmanager notification carries). The config
// checks them when it is loaded and package control again when a
// request arrives, so both must apply the same rule; it lives here, in a
// package of its own, so that config need not link the control
// socket's gRPC stack to check a name. It must not import anything of
// tracepipe's.
package names

import (
	"fmt"
	"regexp"
)

// MaxLen is the longest session or trigger name, in bytes.
const MaxLen = 128

var nameRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._:-]*$`)

// Valid checks a session or trigger name; kind ("session", "trigger")
// is how the error names it.
func Valid(kind, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s name is empty", kind)
	case len(s) > MaxLen:
		return fmt.Errorf("%s name is %d bytes; the limit is %d", kind, len(s), MaxLen)
	case !nameRe.MatchString(s):
		return fmt.Errorf("%s name %q: use letters, digits and . _ : - (not first)", kind, s)
	}
	return nil
}

// EditDistance is the Levenshtein distance of a and b, or limit when it is
// at least limit. Config and filter code use it for did-you-mean hints.
func EditDistance(a, b string, limit int) int {
	ra, rb := []rune(a), []rune(b)
	if d := len(ra) - len(rb); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		rowMin := cur[0]
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			rowMin = min(rowMin, cur[j])
		}
		if rowMin >= limit {
			return limit
		}
		prev, cur = cur, prev
	}
	return min(prev[len(rb)], limit)
}
