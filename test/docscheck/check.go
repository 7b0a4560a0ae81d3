package docscheck

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Finding is one thing a page names that the code does not define.
type Finding struct {
	Doc  string
	Line int
	Msg  string
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.Doc, f.Line, f.Msg) }

// foreignPrograms are programs whose flags and subcommands a page may name:
// a span that starts with one is theirs, and a flag not ours is theirs when
// its sentence names one of them.
var foreignPrograms = []string{
	"kubectl", "helm", "istioctl", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
	"kubelet", "etcd", "containerd", "docker", "podman", "buildah", "chromium", "go", "make",
	"Helm", "Kured", "kured", "Istio", "istio-cni", "ztunnel", "kind", "curl", "openssl", "krew",
	"pilot-discovery",
}

var (
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	fence     = regexp.MustCompile("^\\s*(```|~~~)")
	longFlag  = regexp.MustCompile(`(?:^|[\s/\[(|])--([a-z0-9][a-z0-9-]*)`)
	fieldPath = regexp.MustCompile(`^(spec|status)((?:\.[A-Za-z][A-Za-z0-9]*(?:\[[^\]]*\])?)+)`)
	relPath   = regexp.MustCompile(`^([a-z][A-Za-z0-9]*)(\[\])?((?:\.[a-z][A-Za-z0-9]*(?:\[\])?)+)(?::\s*(\S+))?$`)
	keyValue  = regexp.MustCompile(`^([a-z][A-Za-z0-9]*):\s+([A-Za-z][\w-]*)$`)
	pathValue = regexp.MustCompile(`^:\s*([\w-]+)$`)
	exitWord  = regexp.MustCompile(`(?i)\bexit(?:s|ed)?(?:\s+with)?(?:\s+(?:code|status|codes))?:?\s+(\d+)\b`)
	nextCode  = regexp.MustCompile(`^(?:,|,?\s+or)\s+(\d+)\s`)
	tableCode = regexp.MustCompile(`^\|\s*(\d+)\s*\|(.*)$`)
	heading   = regexp.MustCompile(`^#+\s`)
)

// unit is a paragraph, a list item, a table row or a heading, joined with
// newlines so a match's line can be found.
type unit struct {
	text    string
	line    int    // of its first line
	heading string // the heading it sits under
	code    bool   // a line of a fenced block
}

func (u unit) lineOf(off int) int { return u.line + strings.Count(u.text[:off], "\n") }

func units(text string) []unit {
	var out []unit
	var cur *unit
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	inFence, head := false, ""
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		trim := strings.TrimSpace(line)
		switch {
		case fence.MatchString(line):
			flush()
			inFence = !inFence
		case inFence:
			out = append(out, unit{text: line, line: n, heading: head, code: true})
		case trim == "":
			flush()
		case heading.MatchString(trim):
			flush()
			head = trim
			out = append(out, unit{text: trim, line: n, heading: head})
		case strings.HasPrefix(trim, "|"):
			flush()
			out = append(out, unit{text: trim, line: n, heading: head})
		case cur == nil || strings.HasPrefix(trim, "- ") || strings.HasPrefix(trim, "* ") || regexp.MustCompile(`^\d+\.\s`).MatchString(trim):
			flush()
			cur = &unit{text: line, line: n, heading: head}
		default:
			cur.text += "\n" + line
		}
	}
	flush()
	return out
}

// Check reads a Markdown page and returns each flag, command, exit status
// and CRD field it names that t does not define.
func Check(doc, text string, t Truth) []Finding {
	c := checker{doc: doc, t: t, allFlags: map[string]bool{}}
	for _, p := range t.Programs {
		collectFlags(p, c.allFlags)
	}
	for _, u := range units(text) {
		if u.code {
			c.codeLine(u)
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatchIndex(u.text, -1) {
			span := strings.Join(strings.Fields(strings.ReplaceAll(u.text[m[2]:m[3]], `\|`, "|")), " ")
			c.span(u, m[0], span)
		}
		c.exits(u)
	}
	sort.SliceStable(c.out, func(i, j int) bool { return c.out[i].Line < c.out[j].Line })
	return c.out
}

type checker struct {
	doc      string
	t        Truth
	allFlags map[string]bool
	out      []Finding
}

func (c *checker) add(u unit, off int, format string, args ...any) {
	c.out = append(c.out, Finding{Doc: c.doc, Line: u.lineOf(off), Msg: fmt.Sprintf(format, args...)})
}

func collectFlags(cmd *Command, into map[string]bool) {
	for f := range cmd.Flags {
		into[f] = true
	}
	for _, s := range cmd.Subs {
		collectFlags(s, into)
	}
}

// codeLine checks a fenced line that runs one of our programs.
func (c *checker) codeLine(u unit) {
	line := strings.TrimSpace(u.text)
	line = strings.TrimPrefix(line, "$ ")
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	words := strings.Fields(line)
	if len(words) == 0 {
		return
	}
	switch {
	case words[0] == "nodewise" || words[0] == "bin/nodewise" || words[0] == "kubectl-nodewise":
		c.command(u, 0, "nodewise", words[1:])
	case words[0] == "kubectl" && len(words) > 1 && words[1] == "nodewise":
		c.command(u, 0, "nodewise", words[2:])
	}
}

// span checks one code span at offset off of u.
func (c *checker) span(u unit, off int, span string) {
	words := strings.Fields(span)
	if len(words) == 0 {
		return
	}
	switch first := strings.TrimPrefix(words[0], "bin/"); {
	case first == "kubectl" && len(words) > 1 && words[1] == "nodewise":
		c.command(u, off, "nodewise", words[2:])
		return
	case first == "kubectl-nodewise":
		c.command(u, off, "nodewise", words[1:])
		return
	case c.t.Programs[first] != nil:
		if first == "nodewise" || len(words) > 1 {
			c.command(u, off, first, words[1:])
		}
		return
	case len(words) > 1 && c.topLevel(first):
		// A nodewise command named without the program: `status -w --timeout D`.
		c.command(u, off, "nodewise", words)
		return
	case isForeign(first):
		return
	case strings.HasPrefix(first, "--"):
		for _, m := range longFlag.FindAllStringSubmatch(span, -1) {
			c.bareFlag(u, off, m[1])
		}
		return
	}
	c.field(u, off, span)
}

func isForeign(word string) bool {
	for _, p := range foreignPrograms {
		if word == p {
			return true
		}
	}
	return false
}

func (c *checker) topLevel(word string) bool {
	root := c.t.Programs["nodewise"]
	if root == nil {
		return false
	}
	for _, alt := range strings.Split(word, "|") {
		if root.Subs[alt] == nil {
			return false
		}
	}
	return true
}

// bareFlag checks a flag named on its own: a flag of one of our programs,
// else of a program its sentence names, else allowed as foreign.
func (c *checker) bareFlag(u unit, off int, name string) {
	if c.allFlags[name] || c.t.Foreign["--"+name] {
		return
	}
	sentence := sentenceAt(u.text, off)
	for _, p := range foreignPrograms {
		if regexp.MustCompile(`\b` + regexp.QuoteMeta(p) + `\b`).MatchString(sentence) {
			return
		}
	}
	c.add(u, off, "--%s is not a flag of nodewise, orchestrator, nodeagent or probe (nor does its sentence name whose it is)", name)
}

// sentenceAt is the sentence of text around off: from the last ". " or
// "; " before it to the next one after it, code spans left whole (a table
// row is one sentence).
func sentenceAt(text string, off int) string {
	if strings.HasPrefix(text, "|") {
		return text
	}
	start, end := 0, len(text)
	inCode := false
	for i := 0; i < len(text)-1; i++ {
		if text[i] == '`' {
			inCode = !inCode
			continue
		}
		if inCode || !(text[i] == '.' || text[i] == ';') || !(text[i+1] == ' ' || text[i+1] == '\n') ||
			strings.HasSuffix(text[:i], "e.g") || strings.HasSuffix(text[:i], "i.e") {
			continue
		}
		if i < off {
			start = i + 1
		} else {
			end = i
			break
		}
	}
	return text[start:end]
}

// command walks words ("plan -f FILE [--offline]") down program's tree,
// checking each subcommand and flag.
func (c *checker) command(u unit, off int, program string, words []string) {
	cmd := c.t.Programs[program]
	positional := false
	for i := 0; i < len(words); i++ {
		w := strings.Trim(words[i], "[]()…,;.")
		w = strings.TrimSuffix(w, "...")
		switch {
		case isForeign(w) || strings.ContainsAny(w, "&") || strings.HasSuffix(words[i], ":"):
			return // the rest is another program's, the shell's (`&& echo done`) or prose (an error message)
		case w == "" || strings.ContainsAny(w, "*$<>") || w == "-" || w == "--":
		case strings.HasPrefix(w, "--"):
			name, _, hasValue := strings.Cut(strings.TrimPrefix(w, "--"), "=")
			f, ok := cmd.Flags[name]
			if !ok {
				c.add(u, off, "%s has no flag --%s", cmd.Path, name)
				continue
			}
			if !f.Bool && !hasValue && !strings.HasSuffix(words[i], "]") {
				i++ // its value
			}
		case strings.HasPrefix(w, "-") && len(w) >= 2 && w[1] >= 'a' && w[1] <= 'z':
			short := w[1:2]
			if !cmd.Short[short] {
				c.add(u, off, "%s has no flag -%s", cmd.Path, short)
			}
			if short != "w" && len(w) == 2 && !strings.HasSuffix(words[i], "]") {
				i++ // -f FILE, -o json, -n NS
			}
		case !positional && len(cmd.Subs) > 0 && regexp.MustCompile(`^[a-z][a-z0-9-]*(\|[a-z][a-z0-9-]*)*$`).MatchString(w):
			alts := strings.Split(w, "|")
			for _, a := range alts {
				if cmd.Subs[a] == nil {
					c.add(u, off, "%s has no command %q", cmd.Path, a)
					return
				}
			}
			for _, a := range alts[1:] {
				c.command(u, off, program, append(strings.Fields(strings.TrimPrefix(cmd.Path, program)), append([]string{a}, words[i+1:]...)...))
			}
			cmd = cmd.Subs[alts[0]]
		default:
			positional = true
		}
	}
}

// field checks a CRD field path: spec.x.y / status.x[].y (with an optional
// ": value"), a path relative to one of the schema's objects
// (gates.inconclusive: Pause), or a key given an enum value (abort: wave).
func (c *checker) field(u unit, off int, span string) {
	if m := fieldPath.FindStringSubmatch(span); m != nil {
		path := m[1] + stripIndexes(m[2])
		if c.foreignPath(path) {
			return
		}
		rest := strings.TrimSpace(span[len(m[0]):])
		value := ""
		if v := pathValue.FindStringSubmatch(rest); v != nil {
			value = v[1]
		}
		if msg := c.resolveRooted(strings.Split(path, "."), value); msg != "" {
			c.add(u, off, "`%s`: %s", span, msg)
		}
		return
	}
	if m := relPath.FindStringSubmatch(span); m != nil {
		segs := strings.Split(m[1]+stripIndexes(m[3]), ".")
		if fileExt[segs[len(segs)-1]] || c.foreignPath(strings.Join(segs, ".")) {
			return
		}
		starts := c.objectsNamed(segs[0])
		if len(starts) == 0 {
			return // not a field or value of ours: a Go identifier, a host name
		}
		for _, s := range starts {
			if f := s.lookup(segs[1:]...); f != nil && valueFits(f, m[4]) {
				return
			}
		}
		c.add(u, off, "`%s`: no CRD object field %s (nor chart value) has %s%s", span, segs[0], strings.Join(segs[1:], "."), valueNote(m[4]))
		return
	}
	if m := keyValue.FindStringSubmatch(span); m != nil {
		key, value := m[1], m[2]
		owners := c.enumOwners(value)
		if len(owners) == 0 {
			return // not one of our enums: the key is someone else's
		}
		for _, f := range c.fieldsNamed(key) {
			if valueFits(f, value) {
				return
			}
		}
		c.add(u, off, "`%s`: no CRD field %s takes %s (fields that do: %s)", span, key, value, strings.Join(owners, ", "))
	}
}

// foreignPath: path is, or is under, one of the Truth's foreign paths.
func (c *checker) foreignPath(path string) bool {
	for p := path; p != ""; {
		if c.t.Foreign[p] {
			return true
		}
		i := strings.LastIndex(p, ".")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return false
}

func valueNote(v string) string {
	if v == "" {
		return ""
	}
	return " taking " + v
}

// fileExt are the last parts of file names, not of field paths.
var fileExt = map[string]bool{"json": true, "yaml": true, "yml": true, "go": true, "md": true, "toml": true, "sh": true, "txt": true}

func stripIndexes(p string) string { return regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(p, "") }

// resolveRooted resolves spec.../status... in any kind; "" when one has it.
func (c *checker) resolveRooted(segs []string, value string) string {
	kinds := make([]string, 0, len(c.t.Kinds))
	for k := range c.t.Kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	msg := fmt.Sprintf("no field %s in %s", strings.Join(segs, "."), strings.Join(kinds, " or "))
	for i := len(kinds) - 1; i >= 0; i-- {
		k := kinds[i]
		if f := c.t.Kinds[k].lookup(segs...); f != nil {
			if valueFits(f, value) {
				return ""
			}
			msg = fmt.Sprintf("%s's %s does not take %q (%s)", k, strings.Join(segs, "."), value, allowed(f))
		}
	}
	return msg
}

func allowed(f *Field) string {
	if len(f.Enum) > 0 {
		return "one of " + strings.Join(f.Enum, ", ")
	}
	return "a " + f.Type
}

// valueFits says whether a value a page gives a field is one it takes:
// an enum's member, a boolean's true or false; anything else is not
// checked (numbers, durations, names).
func valueFits(f *Field, v string) bool {
	switch {
	case v == "":
		return true
	case len(f.Enum) > 0:
		for _, e := range f.Enum {
			if e == v {
				return true
			}
		}
		return false
	case f.Type == "boolean":
		_, err := strconv.ParseBool(v)
		return err == nil && (v == "true" || v == "false")
	}
	return true
}

// walk calls fn on every named field of every kind (and, with values, of
// the chart's values).
func (c *checker) walk(values bool, fn func(name string, f *Field)) {
	var rec func(f *Field)
	rec = func(f *Field) {
		for f.Items != nil {
			f = f.Items
		}
		for name, p := range f.Props {
			fn(name, p)
			rec(p)
		}
		if f.Any != nil {
			rec(f.Any)
		}
	}
	for _, k := range c.t.Kinds {
		rec(k)
	}
	if values && c.t.Values != nil {
		rec(c.t.Values)
	}
}

// objectsNamed are the object-typed fields (or lists of objects) named
// name, of the CRDs and the chart's values.
func (c *checker) objectsNamed(name string) []*Field {
	var out []*Field
	c.walk(true, func(n string, f *Field) {
		e := f
		for e.Items != nil {
			e = e.Items
		}
		if n == name && len(e.Props) > 0 {
			out = append(out, f)
		}
	})
	return out
}

func (c *checker) fieldsNamed(name string) []*Field {
	var out []*Field
	c.walk(false, func(n string, f *Field) {
		if n == name {
			out = append(out, f)
		}
	})
	return out
}

// enumOwners names the fields whose enum holds v.
func (c *checker) enumOwners(v string) []string {
	seen := map[string]bool{}
	c.walk(false, func(n string, f *Field) {
		for _, e := range f.Enum {
			if e == v {
				seen[n] = true
			}
		}
	})
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
