package control

import "testing"

// A request naming an unknown trigger is refused with the names it got
// wrong and the ones the session has.
func TestUnknownTriggers(t *testing.T) {
	for _, c := range []struct {
		names, known []string
		want         string
	}{
		{[]string{"oops"}, []string{"oops", "slow"}, ""},
		{[]string{"oops", "nosuch", "nosuch", "x"}, []string{"oops", "slow"}, `unknown trigger "nosuch", "x": the session's triggers are oops, slow (nothing was activated)`},
		{[]string{"nosuch"}, nil, `unknown trigger "nosuch": the session has no trigger_config triggers`},
	} {
		err := unknownTriggers(c.names, c.known)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("unknownTriggers(%q, %q) = %q, want %q", c.names, c.known, got, c.want)
		}
	}
}
