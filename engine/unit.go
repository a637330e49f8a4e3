package engine

import "strings"

// Unit is a rate limit window length. The numbers are those of the Envoy
// RateLimitResponse.RateLimit.Unit enum, so they convert to and from the wire
// (and to the xDS RateLimitUnit) without a table.
type Unit int32

const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = [...]string{"UNKNOWN", "SECOND", "MINUTE", "HOUR", "DAY", "MONTH", "YEAR", "WEEK"}

// unitSeconds are the window lengths of the reference: MONTH is 30 days and
// YEAR 365 days, both as epoch-aligned blocks.
var unitSeconds = [...]int64{0, 1, 60, 3600, 86400, 30 * 86400, 365 * 86400, 7 * 86400}

func (u Unit) String() string {
	if u < 0 || int(u) >= len(unitNames) {
		return "UNKNOWN"
	}
	return unitNames[u]
}

// Seconds is the window length; 0 for UNKNOWN or an out-of-range value.
func (u Unit) Seconds() int64 {
	if u < 0 || int(u) >= len(unitSeconds) {
		return 0
	}
	return unitSeconds[u]
}

// Valid reports whether u names a real window.
func (u Unit) Valid() bool { return u.Seconds() > 0 }

// ParseUnit reads a unit name in any case. "unknown" is not a unit.
func ParseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for i, n := range unitNames {
		if i > 0 && n == up {
			return Unit(i), true
		}
	}
	return UnitUnknown, false
}
