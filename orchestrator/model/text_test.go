package model

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncateKeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 100) // 200 bytes
	got := Truncate(s, 101)
	if len(got) > 101 || !utf8.ValidString(got) || !strings.Contains(got, "bytes cut") {
		t.Errorf("truncate: %d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
	}
	if Truncate("short", 10) != "short" {
		t.Error("a short string was cut")
	}
}
