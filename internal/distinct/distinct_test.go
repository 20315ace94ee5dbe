package distinct

import "testing"

func TestEstimate(t *testing.T) {
	for _, n := range []uint64{0, 1, 10, 1000, 100_000, 2_000_000} {
		var c Counter
		for k := uint64(0); k < n; k++ {
			c.Add(k)
			c.Add(k) // repeats do not count
		}
		got := c.Estimate()
		tol := float64(n)*0.05 + 1
		if d := float64(got) - float64(n); d > tol || d < -tol {
			t.Errorf("%d distinct keys estimated as %d", n, got)
		}
	}
}

func TestAddAllocationFree(t *testing.T) {
	var c Counter
	k := uint64(0)
	if a := testing.AllocsPerRun(100, func() { c.Add(k); k++ }); a != 0 {
		t.Fatalf("Add allocates %v times", a)
	}
}
