package model

import (
	"fmt"
	"unicode/utf8"
)

// Truncate cuts s to at most max bytes (on a rune boundary), ending it with
// a mark that says how many bytes were cut.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	mark := fmt.Sprintf(" … (%d bytes cut)", len(s)-max)
	cut := max - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut < 0 {
		cut = 0
	}
	return s[:cut] + mark
}
