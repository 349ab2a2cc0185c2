// Package bench measures what devplumb costs a pod start (issue 16, `make bench`): the
// ADD+DEL cycle against the delegate alone and Multus (P1), device lookups against the
// node's pod count (P2), a burst of pods against the kubelet's rate limit (P3), one
// invocation's start-up, memory and size (P4), where an ADD's time goes (P5), and a DRA
// device's ADD and DEL from the kubelet and from the API server, with the API requests
// each call makes (P6, issue 12). It runs real binaries as root in temp dirs and network
// namespaces it makes and removes, and writes a table, markdown and a chart. Figures
// report; nothing here fails a test.
package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary is a sample's median and spread.
type Summary struct {
	N                          int
	Median, P25, P75, Min, Max float64
}

// Summarize sorts a copy of xs and takes its quantiles (nearest rank, interpolated).
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Summary{N: len(s), Median: quantile(s, 0.5), P25: quantile(s, 0.25), P75: quantile(s, 0.75), Min: s[0], Max: s[len(s)-1]}
}

func quantile(sorted []float64, q float64) float64 {
	pos := q * float64(len(sorted)-1)
	lo := int(pos)
	if lo+1 >= len(sorted) {
		return sorted[lo]
	}
	frac := pos - float64(lo)
	return sorted[lo]*(1-frac) + sorted[lo+1]*frac
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Format is "median (p25–p75) unit", with a precision that suits the magnitude.
func (s Summary) Format(unit string) string {
	if s.N == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s-%s) %s", num(s.Median), num(s.P25), num(s.P75), unit)
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// Paired is the median of per-round differences between two rows measured in the same
// rounds (P1 runs every row once per round, back to back), with its 95% confidence
// interval. The machine's load drifts between rounds far more than within one, and a
// paired difference cancels that drift where a difference of two medians carries it.
type Paired struct {
	N              int
	Median, Lo, Hi float64
	HasInterval    bool // false with too few rounds for a 95% interval (fewer than 6)
}

// PairedDiff pairs a[k] with b[k] (the same round k). The interval is the median's
// distribution-free one, from order statistics: the sign test's, assuming nothing about
// the differences' distribution.
func PairedDiff(a, b []float64) Paired {
	n := min(len(a), len(b))
	d := make([]float64, n)
	for k := range n {
		d[k] = a[k] - b[k]
	}
	slices.Sort(d)
	p := Paired{N: n}
	if n == 0 {
		return p
	}
	p.Median = quantile(d, 0.5)
	if k := medianRank(n); k > 0 {
		p.Lo, p.Hi, p.HasInterval = d[k-1], d[n-k], true
	}
	return p
}

// medianRank is the largest k with P(Binomial(n, ½) < k) ≤ 2.5%: the k-th smallest and
// k-th largest of n values bound their median with at least 95% confidence. 0: none do.
func medianRank(n int) int {
	// cdf accumulates P(X ≤ i) for X ~ Binomial(n, ½); pmf starts at P(X = 0) = 2^-n.
	pmf, cdf := math.Pow(0.5, float64(n)), 0.0
	k := 0
	for i := 0; i < n; i++ {
		if cdf+pmf > 0.025 {
			break
		}
		cdf += pmf
		k = i + 1
		pmf = pmf * float64(n-i) / float64(i+1)
	}
	return k
}

// Interval is the 95% interval as a table cell.
func (p Paired) Interval() string {
	if !p.HasInterval {
		return "–"
	}
	return fmt.Sprintf("%.1f to %.1f ms", p.Lo, p.Hi)
}

// Within says whether the paired difference is at most limit: "met" when its whole
// interval is, "missed" when none of it is, else "not decided by this run".
func (p Paired) Within(limit float64) string {
	switch {
	case !p.HasInterval:
		return "too few rounds to tell"
	case p.Hi <= limit:
		return "met"
	case p.Lo > limit:
		return "missed"
	default:
		return "not decided by this run"
	}
}
