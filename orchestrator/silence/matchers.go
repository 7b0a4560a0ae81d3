package silence

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/template"
)

// DefaultMatcher silences the alerts whose node label is the node's.
const DefaultMatcher = `node="{{.Node}}"`

// matcherSyntax is Alertmanager's matcher: a label name, an operator and a
// quoted value.
var matcherSyntax = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*$`)

// matcherTemplate is one configured matcher: its value a template of the
// node and the rollout.
type matcherTemplate struct {
	name           string
	isRegex, isNot bool
	value          *template.Template
}

// subject is what a matcher's value template reads.
type subject struct{ Node, Rollout string }

// parseMatcher reads one matcher, name="value" (or !=, =~, !~), its value
// a text/template of {{.Node}} and {{.Rollout}}.
func parseMatcher(s string) (matcherTemplate, error) {
	m := matcherSyntax.FindStringSubmatch(s)
	if m == nil {
		return matcherTemplate{}, fmt.Errorf("matcher %q: want name=\"value\" (or !=, =~, !~), the value quoted", s)
	}
	raw, err := strconv.Unquote(m[3])
	if err != nil {
		return matcherTemplate{}, fmt.Errorf("matcher %q: its value: %w", s, err)
	}
	t, err := template.New(m[1]).Option("missingkey=error").Parse(raw)
	if err != nil {
		return matcherTemplate{}, fmt.Errorf("matcher %q: %w", s, err)
	}
	if err := t.Execute(new(strings.Builder), subject{Node: "node", Rollout: "rollout"}); err != nil {
		return matcherTemplate{}, fmt.Errorf("matcher %q: %w (it may use {{.Node}} and {{.Rollout}})", s, err)
	}
	return matcherTemplate{name: m[1], isRegex: strings.HasSuffix(m[2], "~"), isNot: strings.HasPrefix(m[2], "!"), value: t}, nil
}

// render is the matcher for one node of one rollout.
func (t matcherTemplate) render(sub subject) Matcher {
	var b strings.Builder
	_ = t.value.Execute(&b, sub) // parseMatcher ran it once: it cannot fail on other strings
	return Matcher{Name: t.name, Value: b.String(), IsRegex: t.isRegex, IsEqual: !t.isNot}
}

// String writes m in Alertmanager's matcher syntax (the API's filter).
func (m Matcher) String() string {
	op := map[[2]bool]string{{false, true}: "=", {false, false}: "!=", {true, true}: "=~", {true, false}: "!~"}[[2]bool{m.IsRegex, m.IsEqual}]
	return m.Name + op + strconv.Quote(m.Value)
}
