package algo

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// dateTime is RFC 3339's date-time (section 5.6), the document's "format": "date-time": Go's
// time.Parse also takes a one-digit hour, a comma before the fraction and an offset of any two
// digits' hours and minutes (+24:00, +00:60), which the document refuses, and refuses the
// lower-case "t" and "z" it allows.
var dateTime = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

// ParseDateTime reads an RFC 3339 date-time, as the API's document describes it (an override's
// expiresAt): the API and the dashboard read it alike.
func ParseDateTime(s string) (time.Time, error) {
	if !dateTime.MatchString(s) {
		return time.Time{}, fmt.Errorf("algo: %q is not an RFC 3339 date-time", s)
	}
	return time.Parse(time.RFC3339Nano, strings.ToUpper(s))
}
