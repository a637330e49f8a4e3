package sqlstore_test

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// The prices follow the statements: the clients' filters stay far below
// the default budget (256), costly filters (hundreds of endswith terms) far above it.
func TestCost(t *testing.T) {
	many := func(n int, term, sep string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = strings.ReplaceAll(term, "#", strings.Repeat("x", 1+i%7))
		}
		return strings.Join(parts, sep)
	}
	in16 := "CharacteristicName in (" + many(16, "'#'", ",") + ")"
	for _, c := range []struct {
		coll   *query.Collection
		filter string
		want   int
		why    string
	}{
		{query.Observations, "", 0, "no $filter"},
		{query.Observations, "CharacteristicName eq 'pH'", 4, "1 index range"},
		{query.Observations, "LocationId eq 5 and CharacteristicName eq 'pH'", 5, "1 index range"},
		{query.Observations, "LocationId eq 5 and CharacteristicName eq 'pH' and ActivityStartYear ge 2010", 6, "1 index range"},
		{query.Observations, in16, 64, "16 index range"},
		{query.Observations, "RegionId eq 'hub.atlantic' and CharacteristicName in ('Titanium','Arsenic')", 10, "2 index range"},
		{query.Observations, "contains(CharacteristicName,'pH')", 24, "no indexable condition"},
		{query.Observations, "DOI ne 'x' and endswith(DOI,'a')", 32, "no indexable condition"},
		{query.Observations, "CharacteristicName eq 'pH' and endswith(DOI,'a')", 5, "1 index range"},
		// Costly filters: 256 endswith terms, 128 (eq and gt) alternatives.
		{query.Observations, many(256, "endswith(DOI,'#')", " or "), 16 + 8*256, "more than 16 alternatives"},
		{query.Observations, many(128, "(CharacteristicName eq '#' and ActivityStartYear gt 2000)", " or "), 16 + 8*256, "more than 16 alternatives"},
		{query.Observations, "CharacteristicName in (" + many(17, "'#'", ",") + ")", 16 + 8*17, "more than 16 alternatives"},
		{query.Locations, "Name eq 'Bow River'", 4, "1 index range"},
	} {
		var f query.Expr
		if c.filter != "" {
			var err error
			if f, err = query.ParseFilter(c.coll, c.filter); err != nil {
				t.Fatalf("%q: %v", c.filter, err)
			}
		}
		got, why := sqlstore.Cost(&query.Query{Collection: c.coll, Filter: f})
		if got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%.60q: cost %d (%s), want %d (%s)", c.filter, got, why, c.want, c.why)
		}
	}
}
