package algo

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Names the machine's zone files (or time.LoadLocation's own rules) may know but the zone data
// in the binary does not: each would make a quota's windows depend on the machine.
var zonesNotInTheBinary = []string{
	"", "Local", "localtime", "posixrules", "./Europe/Berlin", "Europe/../Europe/Berlin", "/Europe/Berlin",
	"Europe/Berlin/", "europe/berlin", "right/UTC", "posix/Europe/Berlin", "/usr/share/zoneinfo/Europe/Berlin",
	"/etc/localtime", "../../../etc/passwd", "Europe/Atlantis", "UTC\x00", strings.Repeat("A/", 40) + "UTC",
}

func TestLoadZoneRefusesNamesOutsideTheBinarysZoneData(t *testing.T) {
	for _, name := range zonesNotInTheBinary {
		if loc, ok := LoadZone(name); ok || loc != nil {
			t.Errorf("LoadZone(%q) = %v, %v; want unknown", name, loc, ok)
		}
		err := Definition{Kind: Quota, Rate: 5, Calendar: Day, TimeZone: name}.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Code != CodeInvalidConfig || len(ve.Fields) != 1 || ve.Fields[0].Field != "timeZone" {
			t.Errorf("a quota in %q: %v, want invalid_config naming timeZone alone", name, err)
		}
	}
}

// zoneFingerprint is the zone's name, abbreviation and offset on the 1st and 15th of every month
// from 1900 to 2100: enough to tell apart two versions of a zone's rules.
func zoneFingerprint(loc *time.Location) string {
	var b strings.Builder
	for y := 1900; y <= 2100; y++ {
		for m := time.January; m <= time.December; m++ {
			for _, d := range []int{1, 15} {
				name, off := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).In(loc).Zone()
				fmt.Fprintf(&b, "%s%d,", name, off)
			}
		}
	}
	return loc.String() + ":" + b.String()
}

var zonesInTheBinary = []string{"Europe/Berlin", "America/Havana", "UTC", "Etc/UTC", "Asia/Kolkata"}

func TestLoadZoneLoadsTheBinarysZones(t *testing.T) {
	offsets := []struct {
		zone        string
		at          time.Time
		abbr        string
		offsetHours int
	}{
		{"Europe/Berlin", time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC), "CET", 1},
		{"Europe/Berlin", time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC), "CEST", 2},
		{"America/Havana", time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC), "CST", -5},
		{"America/Havana", time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC), "CDT", -4},
		{"UTC", time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC), "UTC", 0},
	}
	for _, tc := range offsets {
		loc, ok := LoadZone(tc.zone)
		if !ok || loc.String() != tc.zone {
			t.Fatalf("LoadZone(%q) = %v, %v", tc.zone, loc, ok)
		}
		if abbr, off := tc.at.In(loc).Zone(); abbr != tc.abbr || off != tc.offsetHours*3600 {
			t.Errorf("%s at %v: %s %d s, want %s %d h", tc.zone, tc.at, abbr, off, tc.abbr, tc.offsetHours)
		}
		again, _ := LoadZone(tc.zone)
		if again != loc {
			t.Errorf("LoadZone(%q) loaded the zone again: not memoized", tc.zone)
		}
		if err := (Definition{Kind: Quota, Rate: 5, Calendar: Week, TimeZone: tc.zone}).Validate(); err != nil {
			t.Errorf("a quota in %s: %v", tc.zone, err)
		}
	}
}

// The zones are the binary's whatever the machine's zone files say. time.LoadLocation looks in
// $ZONEINFO first (read once per process), so a child process of this test runs with ZONEINFO
// pointed at files that lie: an empty directory but for "localtime", "posixrules" and
// "Europe/Berlin" holding UTC's rules. It must load the same zones as this process, and still
// refuse those names.
func TestLoadZoneIgnoresTheMachinesZoneFiles(t *testing.T) {
	if dir := os.Getenv("SLUICE_TEST_ZONEINFO_CHILD"); dir != "" {
		for _, name := range []string{"localtime", "posixrules"} {
			if _, ok := LoadZone(name); ok {
				fmt.Printf("zone LoadZone(%q) loaded the machine's file\n", name)
			}
		}
		for _, name := range zonesInTheBinary {
			loc, ok := LoadZone(name)
			if !ok {
				fmt.Printf("zone LoadZone(%q) failed\n", name)
				continue
			}
			fmt.Println("zone " + zoneFingerprint(loc))
		}
		return
	}
	dir := t.TempDir()
	utc := zoneFiles()["UTC"]
	rc, err := utc.Open()
	if err != nil {
		t.Fatal(err)
	}
	utcData, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localtime", "posixrules", "Europe/Berlin"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, utcData, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if fake, err := time.LoadLocationFromTZData("Europe/Berlin", utcData); err != nil || zoneFingerprint(fake) == fingerprintOf(t, "Europe/Berlin") {
		t.Fatalf("the fake Europe/Berlin is not a lie (%v)", err)
	}
	t.Setenv("ZONEINFO", dir)
	t.Setenv("SLUICE_TEST_ZONEINFO_CHILD", dir)
	out, err := exec.Command(os.Args[0], "-test.run=^TestLoadZoneIgnoresTheMachinesZoneFiles$", "-test.count=1").CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var got, want []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "zone ") {
			got = append(got, line)
		}
	}
	for _, name := range zonesInTheBinary {
		want = append(want, "zone "+fingerprintOf(t, name))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("with ZONEINFO=%s the zones differ:\n%.2000s", dir, strings.Join(got, "\n"))
	}
}

func fingerprintOf(t *testing.T, name string) string {
	t.Helper()
	loc, ok := LoadZone(name)
	if !ok {
		t.Fatalf("LoadZone(%q) failed", name)
	}
	return zoneFingerprint(loc)
}

// A quota stored by an earlier version, which asked the machine's zone files, may name a zone
// the binary lacks. Its decisions are refused (CheckCount, which the engine asks before every
// decision, refund and give-back), and nothing the algorithms compute for it is UTC's: it has
// one endless window, in which a spent quota stays spent and its rows are never swept.
func TestQuotaInAZoneTheBinaryLacksFailsClosed(t *testing.T) {
	day := int64(86_400_000)
	now := time.Date(2026, 3, 30, 9, 0, 0, 0, time.UTC).UnixMilli()
	yesterday := now - day
	for _, zone := range []string{"localtime", "posixrules", "right/UTC"} {
		def := Definition{Kind: Quota, Rate: 5, Calendar: Day, TimeZone: zone}.Normalized()
		err := def.CheckCount(1, false)
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Code != CodeInvalidConfig || len(ve.Fields) != 1 || ve.Fields[0].Field != "timeZone" ||
			!strings.Contains(ve.Fields[0].Message, fmt.Sprintf("%q", zone)) {
			t.Fatalf("%s: CheckCount = %v, want invalid_config naming timeZone and the zone", zone, err)
		}
		if err := def.CheckCount(0, false); err == nil {
			t.Fatalf("%s: CheckCount(0) admitted", zone)
		}
		if start, end := def.WindowAt(now); start != math.MinInt64 || end != math.MaxInt64 {
			t.Fatalf("%s: window [%d, %d), want one without end", zone, start, end)
		}
		// Spent yesterday (UTC): in UTC a new window has begun; here nothing comes back.
		spent := State{Value: 0, TS: yesterday, Exists: true}
		if d := Decide(def, []State{spent}, 1, false, now, 0); d.OK {
			t.Fatalf("%s: a quota spent yesterday admitted today: %+v", zone, d)
		}
		if v, _ := Peek(def, spent, now, 0); v != 0 {
			t.Fatalf("%s: a quota spent yesterday reads %v today", zone, v)
		}
		if ReadsAsMissing(def, spent, 0, now) {
			t.Fatalf("%s: a spent quota's row reads as missing", zone)
		}
	}
	// The same definitions in UTC, for contrast: yesterday's row is last window's.
	utc := Definition{Kind: Quota, Rate: 5, Calendar: Day, TimeZone: "UTC"}.Normalized()
	if err := utc.CheckCount(1, false); err != nil {
		t.Fatal(err)
	}
	if d := Decide(utc, []State{{Value: 0, TS: yesterday, Exists: true}}, 1, false, now, 0); !d.OK {
		t.Fatalf("UTC: a quota spent yesterday refused today: %+v", d)
	}
}
