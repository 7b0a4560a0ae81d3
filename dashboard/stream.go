package dashboard

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A rollout page's live updates send only what changed. Each page served
// is a tab: the view it shows (sentView) and a subscription to the hub
// taken before the rollout was read, so no change falls between the page
// and its stream. The page's script opens /events?stream=ID; each change
// of the rollout then sends one "patch" event: the cells whose state or
// label changed, the listed rows that changed, and whole only the sections
// whose text changed (the head with the halt, the summary, the filters) or
// whose members changed (the list's page, the map's layout). A stream the
// server does not know (expired, or the server restarted) gets "resync":
// the page loads its <main> again, with a new stream.

// unclaimedFor is how long a served page's tab waits for its stream (a
// page fetched by curl, or closed before its script ran, never opens one);
// maxUnclaimed bounds the tabs waiting, the oldest forgotten first.
const (
	unclaimedFor = time.Minute
	maxUnclaimed = 64
)

// tabs are the rollout pages served and not yet closed.
type tabs struct {
	mu   sync.Mutex
	open map[string]*tab
}

type tab struct {
	rollout string
	q       fleetQuery
	actions bool
	sub     *subscription
	sent    sentView
	served  time.Time // the wall clock's, whatever Config.Now says: it ages the tab
	claimed bool
}

// add keeps t until its stream claims it and returns its ID, forgetting
// the tabs whose stream never came.
func (ts *tabs) add(t *tab) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id := hex.EncodeToString(b)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.open == nil {
		ts.open = map[string]*tab{}
	}
	var waiting []string
	for k, o := range ts.open {
		switch {
		case o.claimed:
		case t.served.Sub(o.served) > unclaimedFor:
			o.sub.close()
			delete(ts.open, k)
		default:
			waiting = append(waiting, k)
		}
	}
	for len(waiting) >= maxUnclaimed {
		oldest := 0
		for i, k := range waiting {
			if ts.open[k].served.Before(ts.open[waiting[oldest]].served) {
				oldest = i
			}
		}
		ts.open[waiting[oldest]].sub.close()
		delete(ts.open, waiting[oldest])
		waiting = append(waiting[:oldest], waiting[oldest+1:]...)
	}
	ts.open[id] = t
	return id
}

// claim hands the tab id to its stream, once; nil when it is not known.
func (ts *tabs) claim(id string) *tab {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.open[id]
	if t == nil || t.claimed {
		return nil
	}
	t.claimed = true
	return t
}

// close forgets the tab id when its stream ends: a page that reconnects
// is sent "resync" and loads itself again.
func (ts *tabs) close(id string) {
	ts.mu.Lock()
	t := ts.open[id]
	delete(ts.open, id)
	ts.mu.Unlock()
	if t != nil {
		t.sub.close()
	}
}

// sentView is what a tab shows, kept to tell what a change changes: each
// cell's class and label, the map's layout, the rows listed (without their
// durations, which the clock alone moves), the list's members, and the
// sections' HTML.
type sentView struct {
	layout uint64
	cells  map[string]mapCell
	list   string
	rows   map[string]string
	parts  map[string]string
}

// patch is one change as the page's script applies it: sections replaced
// by their id, cells restyled by node name, rows replaced.
type patch struct {
	Parts map[string]string `json:"parts,omitempty"`
	Cells [][3]string       `json:"cells,omitempty"` // name, class, label
	Rows  [][2]string       `json:"rows,omitempty"`  // name, <tr>
}

func (p *patch) part(id, html string) {
	if p.Parts == nil {
		p.Parts = map[string]string{}
	}
	p.Parts[id] = html
}

// sections are the rollout page's parts sent whole when their HTML
// changes, by element id, with their templates.
var sections = []struct{ id, template string }{
	{"head", "rollout-head"},
	{"summary", "rollout-summary"},
	{"filters", "rollout-filters"},
}

// view is what the page d shows, as a tab keeps it.
func (s *Server) view(d rolloutData) (sentView, error) {
	cells := 0
	for _, b := range d.Map.Blocks {
		cells += b.Nodes
	}
	v := sentView{cells: make(map[string]mapCell, cells), rows: map[string]string{}, parts: map[string]string{}}
	h := fnv.New64a()
	for _, b := range d.Map.Blocks {
		fmt.Fprintf(h, "|%t %s", b.Canary, b.Zone)
		for _, w := range b.Waves {
			fmt.Fprintf(h, "|%d", w.Wave)
			for _, c := range w.Cells {
				_, _ = io.WriteString(h, c.Name)
				_, _ = h.Write([]byte{0})
				v.cells[c.Name] = c
			}
		}
	}
	v.layout = h.Sum64()
	l := d.List
	var list strings.Builder
	fmt.Fprintf(&list, "%s %d-%d/%d %d/%d", l.What, l.From, l.To, l.Of, l.Page, l.Pages)
	for _, g := range l.Groups {
		for _, r := range g.Nodes {
			list.WriteString(" " + r.Name)
			r.InStep, r.Took = "", ""
			v.rows[r.Name] = fmt.Sprintf("%+v", r)
		}
	}
	v.list = list.String()
	for _, sec := range sections {
		html, err := s.render(sec.template, d)
		if err != nil {
			return v, err
		}
		v.parts[sec.id] = html
	}
	return v, nil
}

// diff is the patch from what a tab shows to d, and what it then shows.
func (s *Server) diff(old sentView, d rolloutData) (patch, sentView, error) {
	var p patch
	v, err := s.view(d)
	if err != nil {
		return p, v, err
	}
	part := func(id, template string) error {
		html, err := s.render(template, d)
		p.part(id, html)
		return err
	}
	for _, sec := range sections {
		if v.parts[sec.id] != old.parts[sec.id] {
			p.part(sec.id, v.parts[sec.id])
		}
	}
	if v.layout != old.layout {
		if err := part("map", "rollout-map"); err != nil {
			return p, v, err
		}
	} else {
		for _, b := range d.Map.Blocks {
			for _, w := range b.Waves {
				for _, c := range w.Cells {
					if v.cells[c.Name] != old.cells[c.Name] {
						p.Cells = append(p.Cells, [3]string{c.Name, c.Class, c.Label})
					}
				}
			}
		}
	}
	if v.list != old.list {
		return p, v, part("list", "rollout-list")
	}
	for _, g := range d.List.Groups {
		for _, r := range g.Nodes {
			if v.rows[r.Name] != old.rows[r.Name] {
				html, err := s.render("rollout-row", r)
				if err != nil {
					return p, v, err
				}
				p.Rows = append(p.Rows, [2]string{r.Name, html})
			}
		}
	}
	return p, v, nil
}

func (s *Server) render(template string, data any) (string, error) {
	var b strings.Builder
	err := s.tmpl.ExecuteTemplate(&b, template, data)
	return b.String(), err
}

// tabData is what tab t's page shows now, or false when its rollout is gone.
func (s *Server) tabData(t *tab) (rolloutData, bool) {
	nr := s.hub.rollout(t.rollout)
	if nr == nil {
		return rolloutData{}, false
	}
	return rolloutData{rolloutPage: buildRollout(nr, t.q, s.cfg.Now()), Actions: t.actions}, true
}

// sendPatch writes what changed for tab t since it was last sent, if its
// rollout changed; false (after a "resync") when the page must load itself
// again.
func (s *Server) sendPatch(w io.Writer, t *tab) bool {
	topic := kindRollout + "/" + t.rollout
	mine := false
	for _, tp := range t.sub.take() {
		mine = mine || tp == topic
	}
	if !mine {
		return true
	}
	d, ok := s.tabData(t)
	if !ok {
		resync(w)
		return false
	}
	p, next, err := s.diff(t.sent, d)
	if err != nil {
		s.cfg.Log.Error("rendering a rollout page's changes", zap.String("rollout", t.rollout), zap.Error(err))
		resync(w)
		return false
	}
	t.sent = next
	if p.Parts == nil && p.Cells == nil && p.Rows == nil {
		return true
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the HTML is the server's own, rendered by html/template; escaping would quintuple its <, > and &
	if err := enc.Encode(p); err != nil {
		resync(w)
		return false
	}
	_, _ = fmt.Fprintf(w, "event: patch\ndata: %s\n\n", bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return true
}

func resync(w io.Writer) {
	_, _ = io.WriteString(w, "event: resync\ndata: "+strconv.Quote("load the page again")+"\n\n")
}
