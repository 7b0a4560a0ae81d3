package write

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// sizer measures a status for its budget: whole, and one node entry.
type sizer struct {
	status func(*v1alpha1.NodeRolloutStatus) int
	entry  func(*v1alpha1.NodeStatus) int
}

var (
	// jsonOnly measures the JSON alone.
	jsonOnly = sizer{
		status: func(s *v1alpha1.NodeRolloutStatus) int { return jsonSize(s) },
		entry:  func(n *v1alpha1.NodeStatus) int { return jsonSize(n) },
	}
	// recorded measures what the status costs the stored object: its JSON
	// and the API server's record of the fields it sets (managedFields),
	// the node entries' JSON counted from their fields (entryJSONSize), not
	// encoded: the status writer measures every write.
	recorded = sizer{
		status: func(s *v1alpha1.NodeRolloutStatus) int { return statusJSONSize(s) + statusRecordSize(s) },
		entry:  func(n *v1alpha1.NodeStatus) int { return entryJSONSize(n) + entryRecordSize(n) },
	}
)

// statusJSONSize is the size of s's JSON: the node entries counted by
// entryJSONSize, the rest encoded.
func statusJSONSize(s *v1alpha1.NodeRolloutStatus) int {
	rest := *s
	rest.Nodes = nil
	size := jsonSize(rest) // holds counts at least: the nodes follow a comma
	if len(s.Nodes) > 0 {
		size += len(`,"nodes":[]`) + len(s.Nodes) - 1
		for i := range s.Nodes {
			size += entryJSONSize(&s.Nodes[i])
		}
	}
	return size
}

// entryJSONSize is the size of n's JSON (encoding/json's), counted from its
// fields; the judgement, rare once history is trimmed, is encoded.
func entryJSONSize(n *v1alpha1.NodeStatus) int {
	size := len(`{}`) - 1 // each field below counts a comma; the last has none
	field := func(set bool, name string, value int) {
		if set {
			size += len(`"":,`) + len(name) + value
		}
	}
	field(true, "name", stringSize(n.Name))
	field(n.Zone != "", "zone", stringSize(n.Zone))
	field(n.Canary, "canary", len("true"))
	field(n.Wave != 0, "wave", len(strconv.Itoa(int(n.Wave))))
	field(true, "state", stringSize(string(n.State)))
	field(n.StateSince != nil, "stateSince", timeSize(n.StateSince))
	field(n.StartTime != nil, "startTime", timeSize(n.StartTime))
	field(n.FinishTime != nil, "finishTime", timeSize(n.FinishTime))
	field(n.Reason != "", "reason", stringSize(n.Reason))
	field(n.Verdict != "", "verdict", stringSize(n.Verdict))
	if n.Detail != nil {
		field(true, "detail", jsonSize(n.Detail))
	}
	if n.Judgement != nil {
		field(true, "judgement", jsonSize(n.Judgement))
	}
	field(n.Baseline != "", "baseline", stringSize(n.Baseline))
	field(n.Controls != "", "controls", stringSize(n.Controls))
	return size
}

// timeSize is the size of t's JSON: "2026-12-01T12:00:00Z", or null.
func timeSize(t *metav1.Time) int {
	if t == nil || t.IsZero() {
		return len("null")
	}
	if y := t.UTC().Year(); y >= 0 && y <= 9999 {
		return len(`"2006-01-02T15:04:05Z"`) // metav1.Time: RFC 3339 in UTC, to the second
	}
	return len(`""`) + len(t.UTC().Format(time.RFC3339))
}

// stringSize is the size of s as encoding/json writes it: quoted, with '"'
// and '\' and \n, \r, \t escaped in two bytes, other control bytes, '<',
// '>', '&', U+2028, U+2029 and invalid UTF-8 in six.
func stringSize(s string) int {
	size := len(`""`)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				size += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				size += 6
			default:
				size++
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1, r == '\u2028', r == '\u2029':
			size += 6
		default:
			size += w
		}
		i += w
	}
	return size
}

// omitReserve is room kept for the Omitted counts an omission adds (their
// JSON and their field record).
const omitReserve = 512

// fit is the status the writer writes for s, within objectBudget as
// recorded measures it, in these steps until it fits:
//
//  1. s itself is trimmed of the detail of history (trimEntries'
//     detailSteps: passed nodes' judgements and times, the rows of the
//     judgements of nodes in flight). The writer keeps s so: every entry.
//
//  2. the entries of history are omitted (omitEntries) from what is
//     written: the nodes that passed, oldest finish first (each node's
//     record, on its annotations, holds its step, and the planner and the
//     workers read that first); then the Pending nodes, last in the plan
//     first (every pass writes the plan again); then the Skipped nodes,
//     oldest first (their record and the NodeSkipped Event keep the step
//     and the reason). Omitted counts them, by state.
//
//  3. the entries left, of nodes in flight and failed, are trimmed of their
//     records (trimEntries' recordSteps: control and baseline records,
//     failed nodes' judgements).
//
//  4. those entries are omitted too, failed nodes first (the halt reason
//     stays), then the nodes in flight, last started first: a successor
//     resumes such a node from its record, failing it closed for want of
//     its baseline. Only thousands of nodes in flight or failed at once,
//     each entry trimmed to its state and reason, get here.
//
// An entry in flight carries what a successor leader resumes its node with
// (start time, judgement counters, baseline and control records), and a
// failed node's reason and verdict are only in status: they go last. What
// fit returns shares no entry with s that step 3 cuts. It returns how
// many entries it trimmed and how many it omitted; apart says what it
// returns is not s (steps 2 to 4 were needed).
func fit(s *v1alpha1.NodeRolloutStatus) (out v1alpha1.NodeRolloutStatus, trimmed, omitted int, apart bool) {
	size, trimmed := trimEntries(s, objectBudget, recorded, detailSteps)
	if size <= objectBudget {
		return *s, trimmed, 0, false
	}
	out, omitted, size = omitEntries(*s, objectBudget, size, []entryKind{kindPassed, kindPending, kindSkipped})
	if size <= objectBudget {
		return out, trimmed, omitted, true
	}
	out.Nodes = slices.Clone(out.Nodes) // s keeps its records
	size, more := trimEntries(&out, objectBudget, recorded, recordSteps)
	out, gone, _ := omitEntries(out, objectBudget, size, []entryKind{kindEnded, kindInFlight})
	return out, trimmed + more, omitted + gone, true
}

// omitEntries is s without entries of the kinds given, in turn (within a
// kind, in entryKinds' order; Pending and in-flight ones last in s first),
// left out while s does not fit budget (size is what recorded measured of
// it) and counted in Omitted, added to what s already omits. The kept
// entries stay in their order; s is not changed. It returns the status,
// how many entries it left out and the size it measured; a status that
// fits is returned as it is.
func omitEntries(s v1alpha1.NodeRolloutStatus, budget, size int, kinds []entryKind) (v1alpha1.NodeRolloutStatus, int, int) {
	if size <= budget {
		return s, 0, size
	}
	byKind := entryKinds(&s)
	var order []int
	for _, k := range kinds {
		idx := byKind[k]
		switch k {
		case kindPending, kindInFlight:
			slices.Reverse(idx)
		case kindSkipped:
			idx = byKind[kindEnded]
			idx = slices.DeleteFunc(slices.Clone(idx), func(i int) bool { return s.Nodes[i].State != v1alpha1.NodeSkipped })
		}
		order = append(order, idx...)
	}
	out := s
	dropped := make([]bool, len(s.Nodes))
	var gone []v1alpha1.NodeStatus
	for next := 0; size > budget && next < len(order); {
		for ; size > budget-omitReserve && next < len(order); next++ {
			i := order[next]
			if dropped[i] {
				continue
			}
			dropped[i] = true
			gone = append(gone, s.Nodes[i])
			size -= recorded.entry(&s.Nodes[i]) + 1 // and a comma
		}
		out.Nodes = make([]v1alpha1.NodeStatus, 0, len(s.Nodes)-len(gone))
		for i, n := range s.Nodes {
			if !dropped[i] {
				out.Nodes = append(out.Nodes, n)
			}
		}
		omitted := addCounts(s.Omitted, planner.Counts(gone))
		out.Omitted = &omitted
		size = recorded.status(&out) // the estimate checked, the Omitted counts in
	}
	return out, len(gone), size
}

// addCounts is a plus b (a may be nil).
func addCounts(a *v1alpha1.RolloutCounts, b v1alpha1.RolloutCounts) v1alpha1.RolloutCounts {
	if a == nil {
		return b
	}
	return v1alpha1.RolloutCounts{Total: a.Total + b.Total, Pending: a.Pending + b.Pending, InProgress: a.InProgress + b.InProgress,
		Done: a.Done + b.Done, Skipped: a.Skipped + b.Skipped, Failed: a.Failed + b.Failed, RolledBack: a.RolledBack + b.RolledBack}
}

// counted are s's counts: its entries, and the nodes it omits.
func counted(s *v1alpha1.NodeRolloutStatus) v1alpha1.RolloutCounts {
	return addCounts(s.Omitted, planner.Counts(s.Nodes))
}

// The API server records, in metadata.managedFields, which fields of the
// object each writer set, as a FieldsV1 set: JSON naming every field it set,
// "f:<name>" each, every entry of a keyed list (status.nodes by name,
// status.conditions by type) as "k:{...}", a field's own presence as ".".
// The status writer's record thus names every field of every node entry
// again. statusRecordSize and entryRecordSize estimate its size in the
// stored object's JSON, from the status's own JSON for the rare and small
// fields and from the entry's Go fields for the many node entries.
const (
	recordWrapper = 320 // the managedFields entry around the set: manager, operation, apiVersion, time, subresource
	recordField   = len(`,"f:":{}`)
	recordItem    = len(`:{".":{}},`)
)

// statusRecordSize estimates the status writer's record of s.
func statusRecordSize(s *v1alpha1.NodeRolloutStatus) int {
	rest := *s
	rest.Nodes = nil
	var v any
	if data, err := json.Marshal(rest); err == nil && json.Unmarshal(data, &v) == nil {
		size := recordWrapper + len(`{"f:status":`) + fieldSetSize(v) + len(`,"f:nodes":{".":{}}`) + 1
		for i := range s.Nodes {
			size += entryRecordSize(&s.Nodes[i])
		}
		return size
	}
	return 0
}

// entryRecordSize estimates the record of one node entry (keyed by its
// name), its comma included.
func entryRecordSize(n *v1alpha1.NodeStatus) int {
	size := keySize("name", n.Name) + recordItem
	for _, f := range []struct {
		set  bool
		name string
	}{
		{true, "name"}, {n.Zone != "", "zone"}, {n.Canary, "canary"}, {n.Wave != 0, "wave"}, {true, "state"},
		{n.StateSince != nil, "stateSince"}, {n.StartTime != nil, "startTime"}, {n.FinishTime != nil, "finishTime"},
		{n.Reason != "", "reason"}, {n.Verdict != "", "verdict"}, {len(n.Detail) > 0, "detail"}, {n.Baseline != "", "baseline"}, {n.Controls != "", "controls"},
	} {
		if f.set {
			size += recordField + len(f.name)
		}
	}
	if n.Judgement != nil {
		size += recordField - len(`{}`) + len("judgement") + flatRecordSize(reflect.ValueOf(n.Judgement).Elem())
	}
	return size
}

// flatRecordSize is the FieldsV1 set of a struct whose fields are all
// leaves to the API server (scalars, and lists the CRD leaves atomic, as
// NodeJudgement's are): {".":{},"f:<name>":{},…} over the fields its JSON
// holds.
func flatRecordSize(v reflect.Value) int {
	size := len(`{".":{}}`)
	t := v.Type()
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" || name == "-" || (opts == "omitempty" && v.Field(i).IsZero()) {
			continue
		}
		size += recordField + len(name)
	}
	return size
}

// fieldSetSize is the size of the FieldsV1 set of the decoded JSON value v:
// an object is {".":{},"f:<name>":<its value's set>,…}; a list of objects
// carrying a name or a type is keyed by it (status.nodes, conditions), any
// other value is a leaf, {}. Lists the CRD leaves atomic are counted as
// keyed when their items have a name (status.targets): an estimate over,
// never under.
func fieldSetSize(v any) int {
	switch t := v.(type) {
	case map[string]any:
		size := len(`{".":{}}`)
		for k, c := range t {
			size += recordField - len(`{}`) + len(k) + fieldSetSize(c)
		}
		return size
	case []any:
		size := len(`{".":{}}`)
		for _, item := range t {
			m, ok := item.(map[string]any)
			if !ok {
				return len(`{}`)
			}
			key, _ := m["name"].(string)
			field := "name"
			if key == "" {
				key, _ = m["type"].(string)
				field = "type"
			}
			if key == "" {
				return len(`{}`)
			}
			size += keySize(field, key) + 1 + fieldSetSize(m) + 1 // "k:…":{…},
		}
		return size
	}
	return len(`{}`)
}

// keySize is the size of a keyed list entry's key in JSON, "k:{\"name\":\"n1\"}".
func keySize(field, value string) int {
	if plain(value) { // a node's name: nothing to escape
		return len(`"k:{\"\":\"\"}"`) + len(field) + len(value)
	}
	k, _ := json.Marshal(map[string]string{field: value})
	quoted, _ := json.Marshal("k:" + string(k))
	return len(quoted)
}

// plain says s has only letters, digits, '-', '.' and '_': JSON holds it as it is.
func plain(s string) bool {
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}
