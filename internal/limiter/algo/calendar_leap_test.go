package algo

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"
)

// The last day of a leap year where a zone is ruled by its POSIX rule alone (the zone file's
// explicit transitions have ended: 2037 in full zone data, 2007 in the slim data Go embeds with
// time/tzdata). There time.Time.ZoneBounds gives an end before the instant (golang/go#81583):
// the start of that UTC day, 365 days after the year's. A window computed by walking forward to
// ZoneBounds' end went backwards and ended on 30 December.

// rulesOnlyZone is a zone of no explicit transitions, ruled by the POSIX TZ rule alone in every
// year (a TZif version 2 file: one local time type, no transitions, the rule as its footer), as
// the slim zone data is after its last transition.
func rulesOnlyZone(t *testing.T, name, rule string, stdOffset int32, abbrev string) *time.Location {
	t.Helper()
	header := func(timecnt, typecnt, charcnt uint32) []byte {
		h := append([]byte("TZif2"), make([]byte, 15)...)
		for _, n := range []uint32{0, 0, 0, timecnt, typecnt, charcnt} { // isutcnt isstdcnt leapcnt timecnt typecnt charcnt
			h = binary.BigEndian.AppendUint32(h, n)
		}
		return h
	}
	chars := append([]byte(abbrev), 0)
	ttinfo := binary.BigEndian.AppendUint32(nil, uint32(stdOffset))
	ttinfo = append(ttinfo, 0, 0) // not DST, abbreviation at index 0
	block := append(header(0, 1, uint32(len(chars))), append(ttinfo, chars...)...)
	data := append(append(block, block...), []byte("\n"+rule+"\n")...) // version 1 block, version 2 block, footer
	loc, err := time.LoadLocationFromTZData(name, data)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return loc
}

// firstInstantOfDate is, by brute force, the first minute at which the local date in loc is
// (y, m, d) or later: every offset and change of the zones below is a whole number of minutes.
func firstInstantOfDate(loc *time.Location, y int, m time.Month, d int) int64 {
	want := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	from := want.Add(-30 * time.Hour)
	for at := from; at.Before(want.Add(30 * time.Hour)); at = at.Add(time.Minute) {
		ly, lm, ld := at.In(loc).Date()
		if !time.Date(ly, lm, ld, 0, 0, 0, 0, time.UTC).Before(want) {
			return at.UnixMilli()
		}
	}
	panic("no offset exceeds 30 hours")
}

// checkWindowsTile walks the windows from the one containing from until to: each contains the
// instants it is asked about, ends where the next starts, and starts at the first instant of a
// period's first local date (found by brute force, not by calendar.go).
func checkWindowsTile(t *testing.T, cal Calendar, loc *time.Location, anchor int, from, to time.Time) {
	t.Helper()
	isFirstDate := func(y int, m time.Month, d int) bool {
		switch cal {
		case Week:
			return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Weekday() == time.Monday
		case Month:
			return d == min(anchor, time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day())
		default:
			return true
		}
	}
	start, end := Window(cal, loc, anchor, from.UnixMilli())
	windows := 0
	for start < to.UnixMilli() {
		where := fmt.Sprintf("%s %s anchor %d: window [%s, %s)", cal, loc, anchor, fmtMS(start, loc), fmtMS(end, loc))
		if end <= start {
			t.Fatalf("%s is empty or runs backwards", where)
		}
		sy, sm, sd := time.UnixMilli(start).In(loc).Date()
		if first := firstInstantOfDate(loc, sy, sm, sd); first != start || !isFirstDate(sy, sm, sd) {
			t.Fatalf("%s: its start is not the first instant of a period (the first instant of %d-%02d-%02d is %s)", where, sy, sm, sd, fmtMS(first, loc))
		}
		for _, ms := range []int64{start, start + 1, (start + end) / 2, end - 60_000, end - 1} {
			if s, e := Window(cal, loc, anchor, ms); s != start || e != end {
				t.Fatalf("%s: the instant %s gets [%s, %s)", where, fmtMS(ms, loc), fmtMS(s, loc), fmtMS(e, loc))
			}
		}
		next, nextEnd := Window(cal, loc, anchor, end)
		if next != end {
			t.Fatalf("%s: the next window starts at %s", where, fmtMS(next, loc))
		}
		start, end = next, nextEnd
		windows++
	}
	if windows < 2 {
		t.Fatalf("%s %s: only %d windows between %s and %s", cal, loc, windows, from, to)
	}
}

// Windows across the ends of leap years in zones with DST rules (northern and southern, at
// 02:00 and at midnight, a half-hour DST), with the zone data installed (explicit transitions
// until 2037) and as rules alone (the slim data Go embeds, from 2008: 2024 and 2028 too).
func TestWindowsTileAcrossTheLastDayOfLeapYears(t *testing.T) {
	zones := []*time.Location{
		rulesOnlyZone(t, "America/Chicago (rules only)", "CST6CDT,M3.2.0,M11.1.0", -6*3600, "CST"),
		rulesOnlyZone(t, "Australia/Sydney (rules only)", "AEST-10AEDT,M10.1.0,M4.1.0/3", 10*3600, "AEST"),
		rulesOnlyZone(t, "America/Santiago (rules only)", "<-04>4<-03>,M9.1.6/24,M4.1.6/24", -4*3600, "-04"),
		// DST from local midnight of January's first Sunday: 1 January 2045, after a leap year, has
		// no midnight, and its day starts at a change that falls within the day ZoneBounds gets wrong.
		rulesOnlyZone(t, "January DST (rules only)", "<-03>3<-02>,M1.1.0/0,M3.2.0/0", -3*3600, "-03"),
	}
	for _, name := range []string{"America/Chicago", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Pacific/Auckland", "America/Santiago", "Australia/Lord_Howe", "America/Havana"} {
		loc, ok := LoadZone(name)
		if !ok {
			t.Fatalf("zone %s", name)
		}
		zones = append(zones, loc)
	}
	for _, loc := range zones {
		for _, year := range []int{2024, 2028, 2040, 2044, 2096} {
			from := time.Date(year, 12, 20, 0, 0, 0, 0, time.UTC)
			to := time.Date(year+1, 1, 12, 0, 0, 0, 0, time.UTC)
			checkWindowsTile(t, Day, loc, 0, from, to)
			checkWindowsTile(t, Week, loc, 0, from, to)
			checkWindowsTile(t, Month, loc, 1, from.AddDate(0, -1, 0), to.AddDate(0, 1, 0))
			checkWindowsTile(t, Month, loc, 31, from.AddDate(0, -1, 0), to.AddDate(0, 1, 0))
		}
	}
}

// The brute-force model of calendar_test.go agrees across 31 December 2040 and 2044 in the
// installed zone data, minute by minute at every boundary.
func TestWindowsMatchTheModelAtTheEndsOfLeapYearsPastTheZoneFiles(t *testing.T) {
	for _, tc := range []calendarCase{
		{"America/Chicago", Day, 0, "2040-12-26", "2041-01-05", "ZoneBounds ends 2040-12-31's period at 30 December 18:00 CST"},
		{"America/Chicago", Month, 0, "2040-10-01", "2041-02-28", "the month of the reported quota"},
		{"Europe/Berlin", Week, 0, "2044-12-10", "2045-01-20", "ISO weeks into 2045"},
		{"Australia/Sydney", Day, 0, "2040-12-26", "2041-01-05", "southern summer (DST) at the year's end"},
		{"Pacific/Auckland", Month, 31, "2044-10-01", "2045-02-28", "billing day 31, +13:00 at the year's end"},
		{"America/Santiago", Day, 0, "2096-12-26", "2097-01-05", "a leap year at the end of the century"},
	} {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.zone, tc.cal, tc.from), func(t *testing.T) {
			from, to := day(tc.from), day(tc.to)
			m := modelCalendar(t, tc.cal, tc.zone, tc.anchor, from, to)
			loc, _ := LoadZone(tc.zone)
			for _, b := range m.bounds {
				for _, d := range []int64{-60_001, -1, 0, 1, 60_000} {
					ws, we, ok := m.window(b + d)
					if !ok {
						continue
					}
					if gs, ge := Window(tc.cal, loc, tc.anchor, b+d); gs != ws || ge != we {
						t.Fatalf("%s: at %s got [%s, %s), model [%s, %s)", tc.why, fmtMS(b+d, loc),
							fmtMS(gs, loc), fmtMS(ge, loc), fmtMS(ws, loc), fmtMS(we, loc))
					}
				}
			}
		})
	}
}

// The reported quota: 100 a month in Chicago admitted 200 within local December 2040, the second
// hundred after the window "ended" at 30 December 18:00.
func TestMonthlyQuotaAdmitsItsRateOnceInDecember2040(t *testing.T) {
	d := Definition{Kind: Quota, Rate: 100, Calendar: Month, TimeZone: "America/Chicago"}.Normalized()
	chicago, _ := LoadZone("America/Chicago")
	mid := time.Date(2040, 12, 15, 12, 0, 0, 0, chicago).UnixMilli()
	late := time.Date(2040, 12, 30, 20, 0, 0, 0, chicago).UnixMilli()
	o1 := Decide(d, []State{{}}, 100, false, mid, 0)
	if !o1.OK {
		t.Fatalf("the first hundred was refused: %+v", o1)
	}
	o2 := Decide(d, []State{o1.Writes[0]}, 100, false, late, 0)
	january := time.Date(2041, 1, 1, 0, 0, 0, 0, chicago).UnixMilli()
	if o2.OK || o2.WindowEnd != january || RetryAfterMillis(o2.RetryAfter) != january-late {
		t.Fatalf("a second hundred on 30 December: ok %v, window ends %s, retryAfter %v; want a refusal until %s",
			o2.OK, fmtMS(o2.WindowEnd, chicago), o2.RetryAfter, fmtMS(january, chicago))
	}
}

// offsetChange finds a change by offsets alone, to the second, and says when there is none.
func TestOffsetChangeIsTheFirstSecondOfAnotherOffset(t *testing.T) {
	berlin, _ := LoadZone("Europe/Berlin")
	// 29 March 2026: 02:00 CET is 03:00 CEST, at 01:00Z.
	change := time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC).Unix()
	from := time.Unix(change-86_400, 0).In(berlin)
	for _, limit := range []int64{change, change + 1, change + 3*86_400} {
		if got := offsetChange(from, limit); got != change {
			t.Errorf("up to %d: %d, want the change at %d", limit, got, change)
		}
	}
	if got := offsetChange(from, change-1); got != change {
		t.Errorf("up to the last second before the change: %d, want %d (no change up to it)", got, change)
	}
	if got := offsetChange(from, from.Unix()); got != from.Unix()+1 {
		t.Errorf("up to t itself: %d, want %d", got, from.Unix()+1)
	}
}
