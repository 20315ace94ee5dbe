package flightrec

import (
	"fmt"
	"testing"
	"time"
)

func TestTriggerRateLimitWindowIs24h(t *testing.T) {
	st := NewMatcher([]Rule{{Name: "t", MaxPer24h: 2}}, 1)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st.now = func() time.Time { return now }
	sp := st.rules[0]
	got := []bool{st.admit(sp), st.admit(sp), st.admit(sp)}
	now = now.Add(24*time.Hour + time.Second)
	got = append(got, st.admit(sp))
	if fmt.Sprint(got) != "[true true false true]" {
		t.Fatalf("admits %v", got)
	}
}
