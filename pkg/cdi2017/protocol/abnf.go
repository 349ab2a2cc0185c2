package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// The draft's ABNF (RFC 5234 core rules):
//
//	resource-spec    = resource-type [ hyphen resource-subtype ]
//	resource-subtype = 1*15alnum
//	resource-type    = ALPHA *15alnum
//	request-id       = alnum *63alnum-hyp
//	alnum            = ALPHA / DIGIT
//	alnum-hyp        = alnum / hyphen
//
// ALPHA is ASCII letters of either case. Since a resource-type holds no
// hyphen, the first hyphen of a resource-spec splits type and subtype.

const (
	maxTypeLen      = 16 // ALPHA *15alnum
	maxSubtypeLen   = 15 // 1*15alnum
	maxRequestIDLen = 64 // alnum *63alnum-hyp
)

func isAlpha(c byte) bool { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }

func allAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) {
			return false
		}
	}
	return true
}

// ValidateResourceType checks resource-type = ALPHA *15alnum.
func ValidateResourceType(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("resource-type is empty")
	case len(s) > maxTypeLen:
		return fmt.Errorf("resource-type %q is longer than %d characters", s, maxTypeLen)
	case !isAlpha(s[0]):
		return fmt.Errorf("resource-type %q must start with a letter", s)
	case !allAlnum(s):
		return fmt.Errorf("resource-type %q may hold only letters and digits", s)
	}
	return nil
}

// ValidateResourceSubtype checks resource-subtype = 1*15alnum.
func ValidateResourceSubtype(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("resource-subtype is empty")
	case len(s) > maxSubtypeLen:
		return fmt.Errorf("resource-subtype %q is longer than %d characters", s, maxSubtypeLen)
	case !allAlnum(s):
		return fmt.Errorf("resource-subtype %q may hold only letters and digits", s)
	}
	return nil
}

// SplitResourceSpec checks resource-spec and returns its type and subtype
// ("" when there is none).
func SplitResourceSpec(spec string) (typ, subtype string, err error) {
	typ, subtype, hasSub := strings.Cut(spec, "-")
	if err := ValidateResourceType(typ); err != nil {
		return "", "", fmt.Errorf("resource-spec %q: %w", spec, err)
	}
	if hasSub {
		if err := ValidateResourceSubtype(subtype); err != nil {
			return "", "", fmt.Errorf("resource-spec %q: %w", spec, err)
		}
	}
	return typ, subtype, nil
}

// ValidateRequestID checks request-id = alnum *63alnum-hyp.
func ValidateRequestID(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("request-id is empty")
	case len(s) > maxRequestIDLen:
		return fmt.Errorf("request-id %q is longer than %d characters", s, maxRequestIDLen)
	case !isAlnum(s[0]):
		return fmt.Errorf("request-id %q must start with a letter or digit", s)
	}
	for i := 1; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return fmt.Errorf("request-id %q may hold only letters, digits and hyphens (position %d)", s, i)
		}
	}
	return nil
}

// Amount is one element of CDI_REQUEST: resource-spec:amount.
type Amount struct {
	Spec   string `json:"spec"`
	Amount int64  `json:"amount"`
}

// String is the element as it appears in CDI_REQUEST.
func (a Amount) String() string { return a.Spec + ":" + strconv.FormatInt(a.Amount, 10) }

// ParseRequest parses CDI_REQUEST=<resource-spec>:<amount>,... The amount
// MUST be an integer (the draft); a negative one cannot be allocated, and a
// resource-spec may appear once.
func ParseRequest(s string) ([]Amount, error) {
	if s == "" {
		return nil, fmt.Errorf("CDI_REQUEST is empty")
	}
	var out []Amount
	seen := map[string]bool{}
	for i, part := range strings.Split(s, ",") {
		spec, num, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("CDI_REQUEST element %d %q: want resource-spec:amount", i+1, part)
		}
		if _, _, err := SplitResourceSpec(spec); err != nil {
			return nil, fmt.Errorf("CDI_REQUEST element %d: %w", i+1, err)
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("CDI_REQUEST element %d %q: amount %q is not an integer", i+1, part, num)
		}
		if n < 0 {
			return nil, fmt.Errorf("CDI_REQUEST element %d %q: amount is negative", i+1, part)
		}
		if seen[spec] {
			return nil, fmt.Errorf("CDI_REQUEST names %s twice", spec)
		}
		seen[spec] = true
		out = append(out, Amount{Spec: spec, Amount: n})
	}
	return out, nil
}

// FormatRequest is the inverse of ParseRequest.
func FormatRequest(amounts []Amount) string {
	parts := make([]string, len(amounts))
	for i, a := range amounts {
		parts[i] = a.String()
	}
	return strings.Join(parts, ",")
}

// ParseNUMALocality parses CDI_REQUEST_NUMA_LOCALITY, a comma separated
// list of NUMA node IDs (non-negative integers).
func ParseNUMALocality(s string) ([]int, error) {
	var out []int
	for i, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("CDI_REQUEST_NUMA_LOCALITY element %d %q is not a NUMA node ID (a non-negative integer)", i+1, part)
		}
		out = append(out, n)
	}
	return out, nil
}

// FormatNUMALocality is the inverse of ParseNUMALocality.
func FormatNUMALocality(nodes []int) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
