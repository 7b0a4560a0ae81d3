package orchestrator

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Window is a parsed maintenance window: on Days (all when empty), from Start
// to End minutes after local midnight in Location.
type Window struct {
	Days     map[time.Weekday]bool
	Start    int // minutes after midnight
	End      int // minutes after midnight, > Start
	Location *time.Location
}

var weekdays = map[v1alpha1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// ParseWindow validates a window: HH:MM times, end after start, known days and
// a time zone the tz database knows (the one check CEL cannot make).
func ParseWindow(w v1alpha1.MaintenanceWindow) (Window, error) {
	start, err := parseClock(w.Start, false)
	if err != nil {
		return Window{}, fmt.Errorf("start: %w", err)
	}
	end, err := parseClock(w.End, true)
	if err != nil {
		return Window{}, fmt.Errorf("end: %w", err)
	}
	if end <= start {
		return Window{}, fmt.Errorf("end %s is not after start %s (windows are same-day; split an overnight window in two)", w.End, w.Start)
	}
	tz := w.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return Window{}, fmt.Errorf("timeZone: unknown time zone %q (use an IANA name such as Europe/Berlin)", w.TimeZone)
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

func parseClock(s string, allow24 bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || len(h) != 2 || len(m) != 2 || err1 != nil || err2 != nil || mm < 0 || mm > 59 || hh < 0 || hh > 24 || (hh == 24 && (mm != 0 || !allow24)) {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	return hh*60 + mm, nil
}

// Contains reports whether t falls inside the window.
func (w Window) Contains(t time.Time) bool {
	lt := t.In(w.Location)
	if w.Days != nil && !w.Days[lt.Weekday()] {
		return false
	}
	min := lt.Hour()*60 + lt.Minute()
	return min >= w.Start && min < w.End
}

// NextOpen returns the first time at or after t when the window is open,
// scanning up to eight days ahead; ok is false if it never opens.
func (w Window) NextOpen(t time.Time) (time.Time, bool) {
	if w.Contains(t) {
		return t, true
	}
	lt := t.In(w.Location)
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, w.Location)
	for i := 0; i <= 8; i++ {
		d := day.AddDate(0, 0, i)
		open := d.Add(time.Duration(w.Start) * time.Minute)
		if open.Before(t) {
			continue
		}
		if w.Days == nil || w.Days[d.Weekday()] {
			return open, true
		}
	}
	return time.Time{}, false
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
