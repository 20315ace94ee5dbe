package peerlimit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestSetBoundsInAllAndPerUID(t *testing.T) {
	s := NewSet(Limits{Max: 5, PerUID: 2})
	for _, uid := range []uint32{1, 1, 2, 2, 3} {
		if err := s.Add(uid); err != nil {
			t.Fatalf("uid %d: %v", uid, err)
		}
	}
	err := s.Add(3)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "5 connections open (at most 5)") {
		t.Fatalf("sixth connection: %v", err)
	}
	s.Remove(2)
	err = s.Add(1)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "uid 1 has 2 connections open (at most 2 per uid)") {
		t.Fatalf("uid 1's third: %v", err)
	}
	if err := s.Add(4); err != nil {
		t.Fatalf("a freed slot: %v", err)
	}
	if total, of := s.Open(1); total != 5 || of != 2 {
		t.Fatalf("open %d, of uid 1 %d", total, of)
	}
	if s.Refused() != 2 {
		t.Fatalf("refused %d, want 2", s.Refused())
	}
}

func TestLimitsDefaults(t *testing.T) {
	if l := NewSet(Limits{}).Limits(); l.Max != 256 || l.PerUID != 64 {
		t.Fatalf("defaults %+v", l)
	}
	if l := NewSet(Limits{Max: 2, PerUID: 9}).Limits(); l.PerUID != 2 {
		t.Fatalf("per uid above max: %+v", l)
	}
}

// A peer refused in a loop is reported once per period, then with the
// count of the refusals in between.
func TestRefusalLogBounded(t *testing.T) {
	var lines []string
	r := &RefusalLog{Logf: func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) }, Every: time.Hour}
	for range 1000 {
		r.Refused("sock", Cred{UID: 7, PID: 9}, ErrLimit)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "pid 9 (uid 7)") {
		t.Fatalf("lines %q", lines)
	}
	r.last = time.Now().Add(-2 * time.Hour)
	r.Refused("sock", Cred{UID: 7, PID: 9}, ErrLimit)
	if len(lines) != 2 || !strings.Contains(lines[1], "and 999 more refused") {
		t.Fatalf("lines %q", lines)
	}
}
