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
