package algo

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
	_ "time/tzdata" // the same zone data as the binary, whatever the machine has installed
)

// The model: an independent account of the calendar boundaries, by brute force. It walks the
// instants of a span minute by minute (every zone offset of the spans below is a whole number
// of minutes), notes the first instant each local date is seen, and lists the period start dates
// by looking at each date alone (a Monday; the day that is the anchor, or the month's last day
// when the month is shorter, counting the month's days one by one). A boundary is the first
// instant at which the local date is a period's start date or later; the window of an instant is
// the last boundary at or before it up to the next one. It shares nothing with calendar.go.

type modelCal struct {
	bounds []int64 // boundary instants, ms, ascending
}

func modelCalendar(t *testing.T, cal Calendar, zone string, anchor int, from, to time.Time) modelCal {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatalf("zone %s: %v", zone, err)
	}
	type civil struct {
		y int
		m time.Month
		d int
	}
	less := func(a, b civil) bool {
		if a.y != b.y {
			return a.y < b.y
		}
		if a.m != b.m {
			return a.m < b.m
		}
		return a.d < b.d
	}
	// Walk the instants: the first instant of each local date, in the order first seen.
	var seen []civil
	first := map[civil]int64{}
	for at := from.Add(-40 * 24 * time.Hour); at.Before(to.Add(40 * 24 * time.Hour)); at = at.Add(time.Minute) {
		y, m, d := at.In(loc).Date()
		c := civil{y, m, d}
		if _, ok := first[c]; !ok {
			first[c] = at.UnixMilli()
			seen = append(seen, c)
		}
	}
	// Every civil date of the span, one by one, so that a skipped date is still a candidate.
	var all []civil
	for c := seen[0]; !less(seen[len(seen)-1], c); {
		all = append(all, c)
		next := time.Date(c.y, c.m, c.d, 12, 0, 0, 0, time.UTC).Add(24 * time.Hour)
		c = civil{next.Year(), next.Month(), next.Day()}
	}
	daysIn := func(y int, m time.Month) int {
		n := 0
		for _, c := range all {
			if c.y == y && c.m == m {
				n++
			}
		}
		return n
	}
	isStart := func(c civil) bool {
		switch cal {
		case Day:
			return true
		case Week:
			return time.Date(c.y, c.m, c.d, 12, 0, 0, 0, time.UTC).Weekday() == time.Monday
		default:
			a := anchor
			if a == 0 {
				a = 1
			}
			// Months at the span's edges are incomplete; the model only trusts complete ones.
			n := daysIn(c.y, c.m)
			if n < 28 {
				return false
			}
			return c.d == min(a, n)
		}
	}
	var m modelCal
	for _, c := range all {
		if !isStart(c) || !less(seen[0], c) {
			continue
		}
		// The first instant whose local date is c or later.
		best := int64(-1)
		for _, s := range seen[1:] { // the walk began within seen[0]: its first instant is unknown
			if !less(s, c) && (best < 0 || first[s] < best) {
				best = first[s]
			}
		}
		if best >= 0 && (len(m.bounds) == 0 || m.bounds[len(m.bounds)-1] != best) {
			m.bounds = append(m.bounds, best)
		}
	}
	return m
}

// window is the model's window of instant ms.
func (m modelCal) window(ms int64) (int64, int64, bool) {
	i := sort.Search(len(m.bounds), func(i int) bool { return m.bounds[i] > ms })
	if i == 0 || i == len(m.bounds) {
		return 0, 0, false
	}
	return m.bounds[i-1], m.bounds[i], true
}

type calendarCase struct {
	zone   string
	cal    Calendar
	anchor int
	from   string // first local date of the span (yyyy-mm-dd), in UTC terms
	to     string
	why    string
}

func day(s string) time.Time {
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestWindowsMatchTheModelAcrossDSTMonthEndsAndLeapYears(t *testing.T) {
	cases := []calendarCase{
		{"Europe/Berlin", Day, 0, "2026-03-20", "2026-04-05", "spring forward 02:00→03:00 (23-hour day)"},
		{"Europe/Berlin", Day, 0, "2026-10-20", "2026-11-05", "fall back 03:00→02:00 (25-hour day)"},
		{"Australia/Sydney", Day, 0, "2026-03-28", "2026-04-12", "southern hemisphere: DST ends in April"},
		{"Australia/Sydney", Day, 0, "2026-09-28", "2026-10-12", "southern hemisphere: DST starts in October"},
		{"America/Santiago", Day, 0, "2026-04-01", "2026-04-10", "southern hemisphere, DST ends at midnight: 24:00→23:00, the day starts twice"},
		{"America/Santiago", Day, 0, "2026-09-01", "2026-09-10", "southern hemisphere, DST starts at midnight: 00:00 does not exist"},
		{"America/Havana", Day, 0, "2026-03-05", "2026-03-12", "midnight does not exist (00:00→01:00)"},
		{"America/Havana", Week, 0, "2026-03-01", "2026-03-20", "a week that starts on a missing midnight"},
		{"Asia/Beirut", Day, 0, "2025-03-25", "2025-04-02", "midnight does not exist (00:00→01:00)"},
		{"Asia/Beirut", Day, 0, "2025-10-22", "2025-10-30", "00:00 falls back to 23:00 of the day before"},
		{"America/Sao_Paulo", Day, 0, "2018-10-30", "2018-11-08", "midnight DST start (2018)"},
		{"Pacific/Apia", Day, 0, "2011-12-25", "2012-01-05", "a whole date skipped (30 December 2011)"},
		{"Europe/Berlin", Week, 0, "2026-12-10", "2027-01-20", "ISO weeks across the year end (1 January 2027 is a Friday)"},
		{"Australia/Sydney", Week, 0, "2020-12-10", "2021-01-20", "ISO week 53 of 2020 into 2021"},
		{"Europe/Berlin", Month, 0, "2026-01-01", "2026-12-31", "calendar months of 2026, both DST changes"},
		{"Europe/Berlin", Month, 31, "2026-01-01", "2026-12-31", "billing day 31 across short months"},
		{"Europe/Berlin", Month, 31, "2024-01-01", "2024-04-30", "billing day 31 in a leap year: 29 February"},
		{"America/New_York", Month, 29, "2023-01-01", "2024-04-30", "billing day 29: 28 February 2023, 29 February 2024"},
		{"America/Santiago", Month, 30, "2026-01-01", "2026-10-31", "billing day 30, southern hemisphere DST at midnight"},
		{"America/Havana", Month, 8, "2026-02-01", "2026-04-30", "billing day 8 on the day midnight does not exist (8 March 2026)"},
		{"UTC", Day, 0, "2024-02-26", "2024-03-03", "UTC around 29 February"},
		{"Asia/Kolkata", Month, 0, "2024-01-01", "2024-04-01", "a half-hour offset"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%s/%d/%s", tc.zone, tc.cal, tc.anchor, tc.from), func(t *testing.T) {
			from, to := day(tc.from), day(tc.to)
			m := modelCalendar(t, tc.cal, tc.zone, tc.anchor, from, to)
			loc, ok := LoadZone(tc.zone)
			if !ok {
				t.Fatalf("LoadZone(%q) failed", tc.zone)
			}
			check := func(ms int64) {
				ws, we, ok := m.window(ms)
				if !ok {
					return // outside the boundaries the model knows
				}
				gs, ge := Window(tc.cal, loc, tc.anchor, ms)
				if gs != ws || ge != we {
					t.Fatalf("%s (%s): at %s got [%s, %s), model [%s, %s)", tc.why, tc.zone, fmtMS(ms, loc),
						fmtMS(gs, loc), fmtMS(ge, loc), fmtMS(ws, loc), fmtMS(we, loc))
				}
			}
			checked := 0
			for _, b := range m.bounds {
				for _, d := range []int64{-60_001, -1, 0, 1, 60_000} {
					check(b + d)
					checked++
				}
			}
			for ms := from.UnixMilli(); ms < to.UnixMilli(); ms += 7*60_000 + 13 {
				check(ms)
				checked++
			}
			if len(m.bounds) < 3 || checked < 100 {
				t.Fatalf("the model found only %d boundaries: the span is too short to test anything", len(m.bounds))
			}
		})
	}
}

func fmtMS(ms int64, loc *time.Location) string {
	return time.UnixMilli(ms).In(loc).Format("2006-01-02 15:04:05.000 MST")
}

// Spot checks with the answers written out, so that the model itself is checked too.
func TestWindowsWrittenOut(t *testing.T) {
	at := func(zone, s string) int64 {
		loc, _ := LoadZone(zone)
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	utc := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	cases := []struct {
		zone       string
		cal        Calendar
		anchor     int
		now        int64
		start, end int64
		why        string
	}{
		{"Europe/Berlin", Day, 0, at("Europe/Berlin", "2026-03-29 12:00"), utc("2026-03-28T23:00:00Z"), utc("2026-03-29T22:00:00Z"), "23-hour day"},
		{"Europe/Berlin", Day, 0, at("Europe/Berlin", "2026-10-25 12:00"), utc("2026-10-24T22:00:00Z"), utc("2026-10-25T23:00:00Z"), "25-hour day"},
		// Havana, 8 March 2026: 00:00 CST does not exist; the day begins at 05:00Z (01:00 CDT).
		{"America/Havana", Day, 0, at("America/Havana", "2026-03-08 12:00"), utc("2026-03-08T05:00:00Z"), utc("2026-03-09T04:00:00Z"), "missing midnight"},
		{"America/Havana", Day, 0, utc("2026-03-08T04:59:59Z"), utc("2026-03-07T05:00:00Z"), utc("2026-03-08T05:00:00Z"), "the last instant before the missing midnight"},
		// Beirut, 26 October 2025: at 00:00 EEST (21:00Z on the 25th) clocks go back to 23:00 EET
		// of the 25th, which repeats its last hour: a 25-hour day, and the 26th begins at 22:00Z.
		{"Asia/Beirut", Day, 0, utc("2025-10-25T21:30:00Z"), utc("2025-10-24T21:00:00Z"), utc("2025-10-25T22:00:00Z"), "the repeated hour is still the 25th"},
		{"Asia/Beirut", Day, 0, utc("2025-10-25T22:00:00Z"), utc("2025-10-25T22:00:00Z"), utc("2025-10-26T22:00:00Z"), "the 26th in EET"},
		{"Europe/Berlin", Month, 31, at("Europe/Berlin", "2026-02-15 12:00"), utc("2026-01-30T23:00:00Z"), utc("2026-02-27T23:00:00Z"), "31 January to 28 February"},
		{"Europe/Berlin", Month, 31, at("Europe/Berlin", "2026-03-30 12:00"), utc("2026-02-27T23:00:00Z"), utc("2026-03-30T22:00:00Z"), "28 February to 31 March (CEST)"},
		{"Europe/Berlin", Month, 31, at("Europe/Berlin", "2024-03-01 12:00"), utc("2024-02-28T23:00:00Z"), utc("2024-03-30T23:00:00Z"), "29 February in a leap year"},
		{"Europe/Berlin", Month, 0, at("Europe/Berlin", "2026-01-31 23:59"), utc("2025-12-31T23:00:00Z"), utc("2026-01-31T23:00:00Z"), "January 31 → February"},
		{"Europe/Berlin", Week, 0, at("Europe/Berlin", "2027-01-01 12:00"), utc("2026-12-27T23:00:00Z"), utc("2027-01-03T23:00:00Z"), "ISO week 53 of 2026"},
		{"Australia/Sydney", Day, 0, at("Australia/Sydney", "2026-04-05 12:00"), utc("2026-04-04T13:00:00Z"), utc("2026-04-05T14:00:00Z"), "southern 25-hour day"},
	}
	for _, tc := range cases {
		loc, _ := LoadZone(tc.zone)
		s, e := Window(tc.cal, loc, tc.anchor, tc.now)
		if s != tc.start || e != tc.end {
			t.Errorf("%s (%s %s): got [%s, %s), want [%s, %s)", tc.why, tc.zone, tc.cal,
				fmtMS(s, time.UTC), fmtMS(e, time.UTC), fmtMS(tc.start, time.UTC), fmtMS(tc.end, time.UTC))
		}
	}
}

// A quota, sharded or not, admits at most its rate in each calendar window, whatever the order
// of counts and shard choices, refuses until the next boundary, and is whole again there; state
// from an ended window reads like none (the sweeper may delete it).
func TestQuotaAdmitsAtMostItsRatePerWindow(t *testing.T) {
	for _, shards := range []int{1, 2, 4} {
		def := Definition{Kind: Quota, Rate: 20, Calendar: Day, TimeZone: "America/Santiago", Shards: shards}.Normalized()
		if err := def.Validate(); err != nil {
			t.Fatal(err)
		}
		loc, _ := LoadZone(def.TimeZone)
		// 5 April 2026: Santiago's clocks go back at midnight, a 25-hour day.
		now := time.Date(2026, 4, 4, 20, 0, 0, 0, loc).UnixMilli()
		states := make([]State, shards)
		r := rand.New(rand.NewPCG(uint64(shards), 3))
		for day := range 3 {
			start, end := Window(Day, loc, 0, now)
			admitted := 0.0
			for now < end {
				count := float64(1 + r.IntN(3))
				a := r.IntN(shards)
				pick := []int{a}
				if shards > 1 {
					b := (a + 1 + r.IntN(shards-1)) % shards
					pick = append(pick, b)
				}
				in := make([]State, len(pick))
				for k, i := range pick {
					in[k] = states[i]
				}
				out := Decide(def, in, count, false, now, 0)
				if out.WindowStart != start || out.WindowEnd != end {
					t.Fatalf("shards %d: window [%d, %d), want [%d, %d)", shards, out.WindowStart, out.WindowEnd, start, end)
				}
				if out.OK {
					admitted += count
					for k, i := range pick {
						if out.Writes[k].Exists {
							states[i] = out.Writes[k]
						}
					}
				} else if got := RetryAfterMillis(out.RetryAfter); got != max(end-now, 1) {
					t.Fatalf("shards %d: retryAfter %d at %d, want the boundary %d", shards, got, now, end)
				}
				now += int64(1 + r.IntN(900_000))
			}
			if admitted > def.Rate || admitted < def.Rate/2 {
				t.Fatalf("shards %d, day %d: admitted %v of %v", shards, day, admitted, def.Rate)
			}
			for _, st := range states {
				if !ReadsAsMissing(def, st, 0, now) {
					t.Fatalf("shards %d: state of an ended window %+v does not read as missing at %d", shards, st, now)
				}
			}
		}
	}
}
