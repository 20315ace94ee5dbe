package registry

import (
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := New[int]("test: thing")
	r.Register("b", 2)
	r.Register("a", 1)
	if v, ok := r.Lookup("b"); !ok || v != 2 {
		t.Errorf("Lookup(b) = %d, %v", v, ok)
	}
	if _, ok := r.Lookup("c"); ok {
		t.Error("Lookup(c) found something")
	}
	if got := r.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Names = %v", got)
	}
	defer func() {
		if p := recover(); p != `test: thing "a" registered twice` {
			t.Errorf("duplicate: panic %v", p)
		}
	}()
	r.Register("a", 3)
}
