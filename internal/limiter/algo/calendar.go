package algo

import (
	"archive/zip"
	"bytes"
	_ "embed" // zoneinfo.zip
	"io"
	"math"
	"sync"
	"time"
)

// Calendar quotas: windows that start at local midnight of a day, of an ISO week (Monday) or of
// a month's billing day, in an IANA time zone. The windows are as long as the calendar makes
// them (23, 24 or 25 hours across DST changes; 28 to 31 days), so they are computed from the
// zone's rules, never from a fixed period.

// Calendar is the window of a quota.
type Calendar string

// The calendars of a quota.
const (
	Day   Calendar = "day"
	Week  Calendar = "week"
	Month Calendar = "month"
)

// zoneinfoZip is the zone database quotas are computed in: a copy of the Go release's
// lib/time/zoneinfo.zip (the data time/tzdata embeds). Every instance sharing a database must
// start a quota's windows at the same instants, so the zones come from the binary alone, never
// from the machine: time.LoadLocation reads /usr/share/zoneinfo first, which accepted names
// such as "localtime" (whatever zone the machine is set to) and files of any tzdata version.
// To refresh it, copy $(go env GOROOT)/lib/time/zoneinfo.zip of the Go release that builds the
// binary over this file (the rules of a zone may change the windows of quotas already stored).
//
//go:embed zoneinfo.zip
var zoneinfoZip []byte

// zoneFiles lists the entries of zoneinfoZip by name, read once: the names are the only zones.
var zoneFiles = sync.OnceValue(func() map[string]*zip.File {
	r, err := zip.NewReader(bytes.NewReader(zoneinfoZip), int64(len(zoneinfoZip)))
	if err != nil {
		panic("algo: the embedded zoneinfo.zip is unreadable: " + err.Error())
	}
	files := make(map[string]*zip.File, len(r.File))
	for _, f := range r.File {
		files[f.Name] = f
	}
	return files
})

// zones memoizes LoadZone: time.LoadLocationFromTZData parses the data anew on every call.
var zones sync.Map // string -> *time.Location

// LoadZone returns the IANA zone called name from the zone data the binary embeds; ok is false
// for a name that is not an entry of it, "Local" and "" included: a quota's zone must not depend
// on the machine that decides.
func LoadZone(name string) (*time.Location, bool) {
	if v, ok := zones.Load(name); ok {
		return v.(*time.Location), true
	}
	f, ok := zoneFiles()[name]
	if !ok {
		return nil, false
	}
	loc, err := loadZoneFile(name, f)
	if err != nil {
		return nil, false
	}
	zones.Store(name, loc)
	return loc, true
}

func loadZoneFile(name string, f *zip.File) (*time.Location, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return time.LoadLocationFromTZData(name, data)
}

// date is a civil date; time.Date normalizes out-of-range days and months.
type date struct {
	y int
	m time.Month
	d int
}

func (a date) addDays(n int) date {
	t := time.Date(a.y, a.m, a.d+n, 0, 0, 0, 0, time.UTC)
	return date{t.Year(), t.Month(), t.Day()}
}

// lastDay is the number of days of month m of year y.
func lastDay(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// anchorIn is the billing day anchor of month m of year y, clamped to the month's last day.
func anchorIn(y int, m time.Month, anchor int) date {
	t := time.Date(y, m, 1, 0, 0, 0, 0, time.UTC) // normalizes m out of 1..12
	y, m = t.Year(), t.Month()
	return date{y, m, min(anchor, lastDay(y, m))}
}

// dayStart is the first instant (ms since the epoch) at which the local date in loc is d or
// later. That is local midnight of d, unless midnight does not exist that day (a DST change at
// 00:00 skips to 01:00): then it is the instant of the change. It walks the zone's periods of
// constant offset from two days before d (no offset exceeds 26 hours, so every instant there is
// still on an earlier date): within one period the local date only grows, so the first instant of
// a period whose local date reaches d is the answer.
func dayStart(d date, loc *time.Location) int64 {
	midnight := time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC).Unix() // local midnight as if UTC
	t := time.Unix(midnight-2*86400, 0).In(loc)
	for range 64 { // a handful of periods at most; the bound only guards against a broken zone
		_, offset := t.Zone()
		first := max(t.Unix(), midnight-int64(offset))
		end, ok := periodEnd(t, first)
		if !ok || first < end {
			return first * 1000
		}
		t = time.Unix(end, 0).In(loc)
	}
	return t.Unix() * 1000
}

// periodEnd is where the zone's period of constant offset that contains t ends (s since the
// epoch; an end may also be a boundary the zone data draws within one offset, such as a year's
// end), looked at as far as the instant need: ok is false when the offset never changes again.
// It is ZoneBounds' end, which is after t, except on the last UTC day of a leap year in a zone's
// rule-only range (after its file's last transition: 2037 in full zone data, 2007 in the slim
// data time/tzdata embeds), where ZoneBounds gives the start of that day (golang/go#81583).
// Walking to an end before t went backwards: a window of December 2040 in Chicago ended on 30
// December, and a monthly quota admitted twice its rate. Such an end is replaced by the first
// second after t, up to need, whose offset differs from t's (offsetChange).
func periodEnd(t time.Time, need int64) (end int64, ok bool) {
	_, e := t.ZoneBounds()
	if e.IsZero() {
		return 0, false
	}
	if e.After(t) {
		return e.Unix(), true
	}
	return offsetChange(t, need), true
}

// offsetChange is the first second after t, up to limit, at which the zone's offset differs from
// t's, or limit + 1 when t's offset holds until limit. It reads offsets alone (Time.Zone, not
// ZoneBounds): if limit has t's offset, the offset is taken to hold from t to limit (dayStart
// asks about a few days at most, and no zone changes its offset and back within those days);
// otherwise it bisects to the second where it changes.
func offsetChange(t time.Time, limit int64) int64 {
	_, offset := t.Zone()
	offsetAt := func(sec int64) int {
		_, o := time.Unix(sec, 0).In(t.Location()).Zone()
		return o
	}
	lo, hi := t.Unix(), limit // the offset at lo is t's; at hi it differs
	if hi <= lo || offsetAt(hi) == offset {
		return max(hi, lo) + 1
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if offsetAt(mid) == offset {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// localDate is the civil date of the instant ms in loc.
func localDate(ms int64, loc *time.Location) date {
	y, m, d := time.UnixMilli(ms).In(loc).Date()
	return date{y, m, d}
}

// periodStartDate is the first date of the calendar period that the date d belongs to.
func periodStartDate(d date, cal Calendar, anchor int) date {
	switch cal {
	case Week:
		wd := int(time.Date(d.y, d.m, d.d, 0, 0, 0, 0, time.UTC).Weekday())
		return d.addDays(-((wd + 6) % 7)) // ISO weeks start on Monday
	case Month:
		a := anchorIn(d.y, d.m, anchor)
		if d.d >= a.d {
			return a
		}
		return anchorIn(d.y, d.m-1, anchor)
	default:
		return d
	}
}

// nextStartDate is the first date of the calendar period after the one that starts on s.
func nextStartDate(s date, cal Calendar, anchor int) date {
	switch cal {
	case Week:
		return s.addDays(7)
	case Month:
		return anchorIn(s.y, s.m+1, anchor)
	default:
		return s.addDays(1)
	}
}

// Window is the calendar window [Start, End) containing the instant now (ms since the epoch):
// Start is the latest boundary at or before now, End the next one. A boundary is the first
// instant of a period's first local date (dayStart). Where a DST change moves the clock back
// across midnight, the local date briefly returns to the previous day; the window that began at
// the first midnight holds on (its start is the latest boundary), so no window starts twice.
// A nil loc (a stored quota whose zone the binary does not have, Definition.zone) has no
// boundaries: one window without end, so that what was counted is never counted again in UTC or
// any other zone's window (decisions on such a quota are refused: Definition.CheckCount).
func Window(cal Calendar, loc *time.Location, anchor int, now int64) (start, end int64) {
	if loc == nil {
		return math.MinInt64, math.MaxInt64
	}
	if anchor < 1 {
		anchor = 1
	}
	s := periodStartDate(localDate(now, loc), cal, anchor)
	start = dayStart(s, loc)
	for range 4 { // more than one step only after the clock moved back across a boundary
		next := nextStartDate(s, cal, anchor)
		end = dayStart(next, loc)
		if end > now {
			break
		}
		s, start = next, end
	}
	return start, end
}
