// Package timewindow reads the maintenance windows and blackouts of a
// NodeRollout as absolute spans of time: each window's days, wall-clock
// times and time zone, across midnight and daylight-saving changes.
package timewindow

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	// The zone database goes with the binary: the images are FROM scratch,
	// with no /usr/share/zoneinfo, and without it every timeZone but UTC
	// would be unknown here while the API server (its CRD rule) knows it.
	_ "time/tzdata"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Window is a parsed maintenance window: on Days (all when empty), from Start
// to End minutes after local midnight in Location. An End at or before Start
// is on the next day (the window crosses midnight).
//
// Times are wall-clock times. Each day's window is one absolute span, from
// the first moment the local clock reads Start to the first moment after it
// that it reads End (wallClock). So on a spring-forward day a Start or End
// inside the skipped hour is the moment the clock jumps (02:30 in Berlin opens
// at 03:00 CEST), and on the autumn day a window that holds the repeated hour
// lasts an hour longer, while one whose End falls in it closes at its first
// pass.
type Window struct {
	Days     map[time.Weekday]bool
	Start    int // minutes after midnight
	End      int // minutes after midnight; at or before Start: the next day
	Location *time.Location
}

var weekdays = map[v1alpha1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// ParseWindow validates a window: HH:MM times, an end that differs from the
// start, known days and a time zone the tz database knows (the one check CEL
// cannot make).
func ParseWindow(w v1alpha1.MaintenanceWindow) (Window, error) {
	start, err := parseClock(w.Start, false)
	if err != nil {
		return Window{}, fmt.Errorf("start: %w", err)
	}
	end, err := parseClock(w.End, true)
	if err != nil {
		return Window{}, fmt.Errorf("end: %w", err)
	}
	if end == start {
		return Window{}, fmt.Errorf("end %s must differ from its start %s (an end before the start crosses midnight; 00:00–24:00 is a whole day)", w.End, w.Start)
	}
	loc, err := loadZone(w.TimeZone)
	if err != nil {
		return Window{}, err
	}
	win := Window{Start: start, End: end, Location: loc}
	if len(w.Days) > 0 {
		win.Days = map[time.Weekday]bool{}
		for _, d := range w.Days {
			wd, ok := weekdays[d]
			if !ok {
				return Window{}, fmt.Errorf("days: %q is not one of Mon Tue Wed Thu Fri Sat Sun", d)
			}
			win.Days[wd] = true
		}
	}
	return win, nil
}

func loadZone(tz string) (*time.Location, error) {
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("timeZone: unknown time zone %q (use an IANA name such as Europe/Berlin)", tz)
	}
	return loc, nil
}

func parseClock(s string, allow24 bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil || mm < 0 || mm > 59 || hh < 0 || hh > 24 || (hh == 24 && (mm != 0 || !allow24)) {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	return hh*60 + mm, nil
}

// wallClock is the first instant the clock in loc reads y-m-d hh:mm (minutes
// after midnight; 24:00 is the next day's 00:00). A time the clock skips (the
// spring-forward hour) is the instant of the jump, the first one whose clock
// reads later; a time it shows twice (autumn) is the first of the two.
func wallClock(y int, m time.Month, d, minutes int, loc *time.Location) time.Time {
	want := time.Date(y, m, d, 0, minutes, 0, 0, time.UTC) // the wall clock, as if UTC
	var best time.Time
	// The offsets in force around that day: a transition moves by at most a
	// day's worth of offsets, so the ones 26 h either side cover both.
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := want.Add(probe).In(loc).Zone()
		c := want.Add(-time.Duration(off) * time.Second)
		if l := c.In(loc); sameWall(l, want) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best
	}
	// Skipped: read with the offset before the jump, the wall time lands
	// after it; the jump is where the zone in force just before that ends.
	_, off := want.Add(-26 * time.Hour).In(loc).Zone()
	after := want.Add(-time.Duration(off) * time.Second)
	start, _ := after.In(loc).ZoneBounds()
	return start
}

func sameWall(l, want time.Time) bool {
	return l.Year() == want.Year() && l.Month() == want.Month() && l.Day() == want.Day() && l.Hour() == want.Hour() && l.Minute() == want.Minute()
}

// occurrence is the window's span opening on the local day y-m-d.
func (w Window) occurrence(y int, m time.Month, d int) (open, close time.Time) {
	open = wallClock(y, m, d, w.Start, w.Location)
	endDay := d
	if w.End <= w.Start {
		endDay++ // time.Date normalises the 32nd
	}
	return open, wallClock(y, m, endDay, w.End, w.Location)
}

// spans calls f with each day's span that may hold or follow t, in order,
// from the day before t (a window that crossed midnight) up to eight days
// after it, skipping days the window does not open on; f returns false to stop.
func (w Window) spans(t time.Time, f func(open, close time.Time) bool) {
	lt := t.In(w.Location)
	for i := -1; i <= 8; i++ {
		day := time.Date(lt.Year(), lt.Month(), lt.Day()+i, 12, 0, 0, 0, w.Location)
		if w.Days != nil && !w.Days[day.Weekday()] {
			continue
		}
		if open, close := w.occurrence(day.Year(), day.Month(), day.Day()); close.After(open) && !f(open, close) {
			return
		}
	}
}

// Contains reports whether t falls inside the window.
func (w Window) Contains(t time.Time) bool {
	_, ok := w.ClosesAt(t)
	return ok
}

// ClosesAt is the end of the span holding t, if one does.
func (w Window) ClosesAt(t time.Time) (time.Time, bool) {
	var end time.Time
	w.spans(t, func(open, close time.Time) bool {
		if !t.Before(open) && t.Before(close) {
			end = close
			return false
		}
		return open.Before(t)
	})
	return end, !end.IsZero()
}

// NextOpen returns the first time at or after t when the window is open,
// scanning up to eight days ahead; ok is false if it never opens.
func (w Window) NextOpen(t time.Time) (time.Time, bool) {
	var next time.Time
	w.spans(t, func(open, close time.Time) bool {
		switch {
		case t.Before(open):
			next = open
		case t.Before(close):
			next = t
		default:
			return true
		}
		return false
	})
	return next, !next.IsZero()
}

// InAnyWindow is true when there are no windows or t is inside one of them.
func InAnyWindow(ws []Window, t time.Time) bool {
	if len(ws) == 0 {
		return true
	}
	for _, w := range ws {
		if w.Contains(t) {
			return true
		}
	}
	return false
}

// NextWindowOpen is the earliest opening of any window at or after t.
func NextWindowOpen(ws []Window, t time.Time) (time.Time, bool) {
	var best time.Time
	found := false
	for _, w := range ws {
		if o, ok := w.NextOpen(t); ok && (!found || o.Before(best)) {
			best, found = o, true
		}
	}
	return best, found
}

// Blackout is a parsed blackout: no node starts in [Start, End).
type Blackout struct {
	Start, End time.Time
	Reason     string
}

// ParseBlackout validates a blackout: local date-times, an end after the
// start, a known time zone. Its ends are read as a window's are (wallClock).
func ParseBlackout(b v1alpha1.Blackout) (Blackout, error) {
	loc, err := loadZone(b.TimeZone)
	if err != nil {
		return Blackout{}, err
	}
	at := func(field, s string) (time.Time, error) {
		t, err := time.Parse("2006-01-02T15:04", s)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: %q is not YYYY-MM-DDTHH:MM", field, s)
		}
		return wallClock(t.Year(), t.Month(), t.Day(), t.Hour()*60+t.Minute(), loc), nil
	}
	start, err := at("start", b.Start)
	if err != nil {
		return Blackout{}, err
	}
	end, err := at("end", b.End)
	if err != nil {
		return Blackout{}, err
	}
	if !end.After(start) {
		return Blackout{}, fmt.Errorf("end %s is not after start %s", b.End, b.Start)
	}
	return Blackout{Start: start, End: end, Reason: b.Reason}, nil
}

// String is the window as written: days, HH:MM–HH:MM and the time zone.
func (w Window) String() string {
	days := "every day"
	if w.Days != nil {
		var ds []string
		for d := time.Sunday; d <= time.Saturday; d++ {
			if w.Days[d] {
				ds = append(ds, d.String()[:3])
			}
		}
		days = strings.Join(ds, ",")
	}
	s := fmt.Sprintf("%s %s–%s %s", days, clock(w.Start), clock(w.End), w.Location)
	if w.End <= w.Start {
		s += " (crosses midnight)"
	}
	return s
}

func clock(min int) string { return fmt.Sprintf("%02d:%02d", min/60, min%60) }

// FirstOverlap is the first instant from now on at which a and b are both
// open, looking a week ahead (every weekday of each window).
func FirstOverlap(a, b Window, now time.Time) (time.Time, bool) {
	var first time.Time
	a.spans(now, func(aOpen, aClose time.Time) bool {
		b.spans(now, func(bOpen, bClose time.Time) bool {
			from, to := later(aOpen, bOpen), earlier(aClose, bClose)
			if from.Before(to) && to.After(now) && (first.IsZero() || from.Before(first)) {
				first = later(from, now)
			}
			return true
		})
		return true
	})
	return first, !first.IsZero()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
