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

// Match checks a trigger's name first, then its producer against the
// whole of producer_name_regex, and counts each outcome once.
func TestMatcherChecksNameThenProducer(t *testing.T) {
	m := NewMatcher([]Rule{{Name: "a", ProducerNameRegex: "app.*", StopDelay: time.Second}, {Name: "b"}}, 1)
	type call struct {
		name, producer string
		acts           bool
	}
	for _, c := range []call{
		{"x", "app1", false},    // unknown
		{"a", "myapp1", false},  // the regex must match the whole name
		{"a", "", false},        // no producer (CLI) does not match a regex
		{"a", "app1", true},     // acts with its rule
		{"b", "anything", true}, // no regex: any producer
	} {
		r, ok := m.Match(c.name, c.producer)
		if ok != c.acts || ok && r.Name != c.name {
			t.Fatalf("Match(%q, %q) = %+v, %v; want acts=%v", c.name, c.producer, r, ok, c.acts)
		}
		if ok && c.name == "a" && r.StopDelay != time.Second {
			t.Fatalf("rule a's stop delay %v", r.StopDelay)
		}
	}
	m.CountDropped()
	want := TriggerStats{Received: 5, Acted: 2, Unknown: 1, ProducerMismatch: 2, Dropped: 1}
	if got := m.Stats(); got != want {
		t.Fatalf("stats %+v, want %+v", got, want)
	}
}
