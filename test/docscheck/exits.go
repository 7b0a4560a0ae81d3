package docscheck

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// exits checks "exits N ...", "exit codes: 0 ..., 1 ...", and the rows of
// a table under an "Exit codes" heading: each code must be defined, and the
// words after it must not name another code's situation.
func (c *checker) exits(u unit) {
	if m := tableCode.FindStringSubmatch(u.text); m != nil && strings.Contains(strings.ToLower(u.heading), "exit code") {
		code, _ := strconv.Atoi(m[1])
		seg, _, _ := segmentAt(m[2], 0)
		c.exitSegment(u, 0, code, seg)
		return
	}
	for _, m := range exitWord.FindAllStringSubmatchIndex(u.text, -1) {
		code, _ := strconv.Atoi(u.text[m[2]:m[3]])
		pos := m[1]
		for {
			seg, next, nextCode := segmentAt(u.text, pos)
			c.exitSegment(u, m[0], code, seg)
			if next < 0 {
				break
			}
			code, pos = nextCode, next
		}
	}
}

// segmentAt is the meaning after an exit code at pos: up to the end of the
// sentence, or to the next code of a list (", 2 Halted", " or 3 when").
// next is where the next code's meaning starts (-1: none).
func segmentAt(text string, pos int) (seg string, next, code int) {
	depth, inCode := 0, false
	for i := pos; i < len(text); i++ {
		ch := text[i]
		switch {
		case ch == '`':
			if !inCode && isForeign(strings.SplitN(text[i+1:], " ", 2)[0]) {
				return text[pos:i], -1, 0 // what follows is another program's: "exit 1, `helm test` reports Failed"
			}
			inCode = !inCode
		case inCode:
		case ch == '(':
			depth++
		case ch == ')':
			depth--
			if depth < 0 {
				return text[pos:i], -1, 0
			}
		case ch == ';' || ch == '|' || (ch == '.' && (i+1 == len(text) || text[i+1] == ' ' || text[i+1] == '\n')):
			return text[pos:i], -1, 0
		case ch == ',' || ch == ' ':
			if m := nextCode.FindStringSubmatchIndex(strings.ReplaceAll(text[i:], "\n", " ")); m != nil && depth == 0 {
				n, _ := strconv.Atoi(text[i+m[2] : i+m[3]])
				return text[pos:i], i + m[3], n
			}
		}
	}
	return text[pos:], -1, 0
}

func (c *checker) exitSegment(u unit, off, code int, seg string) {
	if _, ok := c.t.ExitCodes[code]; !ok {
		c.add(u, off, "exit status %d is not one the CLI defines (%s)", code, c.codes())
		return
	}
	for other, words := range c.t.ExitCodes {
		if other == code {
			continue
		}
		var named []string
		for _, w := range words {
			if wordIn(w, seg) {
				named = append(named, w)
			}
		}
		if len(named) > 0 {
			c.add(u, off, "gives exit status %d for %q, which is exit status %d's (%s)", code, strings.TrimSpace(oneLine(seg)), other, strings.Join(named, ", "))
		}
	}
}

func (c *checker) codes() string {
	var cs []int
	for code := range c.t.ExitCodes {
		cs = append(cs, code)
	}
	sort.Ints(cs)
	return strings.ReplaceAll(strings.Trim(fmt.Sprint(cs), "[]"), " ", ", ")
}

// wordIn: a capitalised word (a phase) matches as written, others in any case.
func wordIn(w, text string) bool {
	pat := `\b` + regexp.QuoteMeta(w) + `\b`
	if strings.ToLower(w) == w {
		pat = `(?i)` + pat
	}
	return regexp.MustCompile(pat).MatchString(text)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
