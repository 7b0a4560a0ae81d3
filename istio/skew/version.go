package skew

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is an Istio release: major.minor.patch. A revision name such as
// "1-27" parses to 1.27 with Patch -1 (unknown).
type Version struct {
	Major, Minor, Patch int
}

// ParseVersion reads "1.27.3", "v1.27.3", "1.27", "1-27", "1-27-3" and image
// tag forms such as "1.27.3-distroless" (the suffix after the patch is ignored).
func ParseVersion(s string) (Version, error) {
	in := s
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	sep := "."
	if !strings.Contains(s, ".") && strings.Contains(s, "-") {
		sep = "-"
	}
	parts := strings.SplitN(s, sep, 3)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("version %q: want major.minor[.patch]", in)
	}
	v := Version{Patch: -1}
	var err error
	if v.Major, err = strconv.Atoi(parts[0]); err != nil {
		return Version{}, fmt.Errorf("version %q: major: %w", in, err)
	}
	if v.Minor, err = strconv.Atoi(parts[1]); err != nil {
		return Version{}, fmt.Errorf("version %q: minor: %w", in, err)
	}
	if len(parts) == 3 {
		p := parts[2]
		if i := strings.IndexAny(p, "-+_"); i >= 0 {
			p = p[:i]
		}
		if v.Patch, err = strconv.Atoi(p); err != nil {
			return Version{}, fmt.Errorf("version %q: patch: %w", in, err)
		}
	}
	return v, nil
}

// MustParse is ParseVersion for constants in tests and tables; it panics on bad input.
func MustParse(s string) Version {
	v, err := ParseVersion(s)
	if err != nil {
		panic(err)
	}
	return v
}

func (v Version) String() string {
	if v.Patch < 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// MinorString is "1.27", the granularity the support policy speaks in.
func (v Version) MinorString() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// MinorsBehind is how many minor releases v is behind cp (negative when ahead).
// Different majors are treated as incomparable and reported as a large gap.
func (v Version) MinorsBehind(cp Version) int {
	if v.Major != cp.Major {
		if v.Major < cp.Major {
			return 1 << 20
		}
		return -(1 << 20)
	}
	return cp.Minor - v.Minor
}

// Less orders versions; an unknown patch sorts before every known one.
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}
