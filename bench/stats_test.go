package bench

import (
	"math/rand/v2"
	"testing"
)

// The k-th smallest and largest of n bound the median at 95%: k from the binomial
// tables (n=30: the 10th and 21st; n=100: the 40th and 61st).
func TestMedianRank(t *testing.T) {
	for n, want := range map[int]int{5: 0, 6: 1, 8: 1, 9: 2, 30: 10, 100: 40} {
		if got := medianRank(n); got != want {
			t.Errorf("medianRank(%d) = %d, want %d", n, got, want)
		}
	}
}

// A load that drifts from round to round moves both rows of a round alike: the paired
// difference keeps only what one row adds over the other.
func TestPairedDiffCancelsDrift(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var a, b []float64
	for range 30 {
		load := 100 + 60*rng.Float64()
		a = append(a, load+5+rng.Float64()) // adds 5 to 6 ms
		b = append(b, load)
	}
	p := PairedDiff(a, b)
	if p.N != 30 || !p.HasInterval || p.Median < 5 || p.Median > 6 || p.Lo < 5 || p.Hi > 6 || p.Lo > p.Median || p.Hi < p.Median {
		t.Fatalf("paired %+v, want a median and interval within 5-6 ms", p)
	}
	if got := p.Within(6); got != "met" {
		t.Errorf("within 6 ms: %q", got)
	}
	if got := p.Within(4.9); got != "missed" {
		t.Errorf("within 4.9 ms: %q", got)
	}
	if got := p.Within(p.Median); got != "not decided by this run" {
		t.Errorf("within its own median: %q", got)
	}
}

func TestPairedDiffFewRounds(t *testing.T) {
	p := PairedDiff([]float64{3, 4, 9}, []float64{1, 1, 1, 1})
	if p.N != 3 || p.Median != 3 || p.HasInterval || p.Interval() != "–" || p.Within(100) != "too few rounds to tell" {
		t.Fatalf("%+v %q %q", p, p.Interval(), p.Within(100))
	}
	if p := PairedDiff(nil, nil); p.N != 0 || p.Median != 0 || p.HasInterval {
		t.Fatalf("empty: %+v", p)
	}
}

// The paired rounds, when P1 ran them, decide a row's time over the pass-through.
func TestPairedOverPassPrefersThePairedRounds(t *testing.T) {
	pass := &variant{net: "pass", ms: []float64{100, 100, 100}}
	row := &variant{net: "dpagent", ms: []float64{150, 150, 150}}
	if p := pairedOverPass(row, pass); p.Median != 50 || p.N != 3 {
		t.Fatalf("without paired rounds: %+v, want P1's own 50 ms over 3 rounds", p)
	}
	pass.paired, row.paired = []float64{100, 101, 102, 103}, []float64{105, 106, 107, 108}
	if p := pairedOverPass(row, pass); p.Median != 5 || p.N != 4 {
		t.Fatalf("with paired rounds: %+v, want their 5 ms over 4 rounds", p)
	}
}
