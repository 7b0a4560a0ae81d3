package status

import (
	"testing"
	"unicode/utf8"
)

// TestTruncByRunes: the status table cuts a verdict by runes, so a "→" at
// the cut stays whole and the cell is valid UTF-8 of the asked width.
func TestTruncByRunes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"pass", 8, "pass"},
		{"baseline → soak → pass", 12, "baseline → …"},
		{"→→→→", 3, "→→…"},
		{"ab→cd", 4, "ab→…"},
	} {
		got := trunc(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) || utf8.RuneCountInString(got) > tc.n {
			t.Errorf("trunc(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
