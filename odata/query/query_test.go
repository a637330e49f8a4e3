package query

import (
	"errors"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	for _, c := range []struct {
		raw  string
		want []Param
		err  bool
	}{
		{raw: "", want: nil},
		{raw: "%24top=10&%24filter=A+eq+%27x%27", want: []Param{{"$top", "10"}, {"$filter", "A eq 'x'"}}},
		{raw: "$top=10&$filter=A%20eq%20'x'", want: []Param{{"$top", "10"}, {"$filter", "A eq 'x'"}}},
		{raw: "$skiptoken=Id:5&&$select=", want: []Param{{"$skiptoken", "Id:5"}, {"$select", ""}}},
		{raw: "$count", want: []Param{{"$count", ""}}},
		{raw: "a=b=c", want: []Param{{"a", "b=c"}}},
		{raw: "$filter=%C3%A9t%C3%A9", want: []Param{{"$filter", "été"}}},
		{raw: "$top=%zz", err: true},
		{raw: "$top=%2", err: true},
		{raw: "$top=%", err: true},
		{raw: "$filter=%E2%82", err: true},
		{raw: "%ff=1", err: true},
	} {
		got, err := Decode([]byte(c.raw))
		if c.err {
			if !errors.Is(err, ErrUndecodable) {
				t.Errorf("Decode(%q) err = %v, want ErrUndecodable", c.raw, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Decode(%q): %v", c.raw, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("Decode(%q) = %q, want %q", c.raw, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("Decode(%q)[%d] = %q, want %q", c.raw, i, got[i], c.want[i])
			}
		}
	}
}

func TestParseFilter(t *testing.T) {
	const uuid = "5C8B3F1A-1234-4ABC-9DEF-0123456789AB"
	for _, c := range []struct {
		coll   *Collection
		filter string
		want   string // canonical form; "" when err is set
		err    string // substring of the error detail
	}{
		{coll: Observations, filter: "LocationId eq '3271776'", want: "LocationId eq '3271776'"},
		{coll: Observations, filter: "LocationId eq 3271776", want: "LocationId eq '3271776'"},
		{coll: Observations, filter: "ActivityStartYear lt '2015'", want: "ActivityStartYear lt '2015'"},
		{coll: Observations, filter: "ActivityStartDateYear ge 2010", want: "ActivityStartYear ge '2010'"},
		{coll: Observations, filter: "ActivityStartYear lte 2010 and ActivityStartYear gte 2001", want: "ActivityStartYear le '2010' and ActivityStartYear ge '2001'"},
		{coll: Locations, filter: "Longitude gt '-102.01' and Latitude lt 60", want: "Longitude gt '-102.01' and Latitude lt '60'"},
		{coll: Metadata, filter: "CreateTimestamp gt 2020-03-23", want: "CreateTimestamp gt '2020-03-23T00:00:00.000Z'"},
		{coll: Metadata, filter: "CreateTimestamp gt '2020-03-23'", want: "CreateTimestamp gt '2020-03-23T00:00:00.000Z'"},
		{coll: Metadata, filter: "CreateTimestamp le '2020-03-23T10:11:12.5+02:00'", want: "CreateTimestamp le '2020-03-23T08:11:12.500Z'"},
		{coll: Metadata, filter: "Id eq '" + uuid + "'", want: "Id eq '" + strings.ToLower(uuid) + "'"},
		{coll: Observations, filter: "CharacteristicName eq 'Alkalinity, total'", want: "CharacteristicName eq 'Alkalinity, total'"},
		{coll: Observations, filter: "CharacteristicName eq 'DDT/DDD/DDE, sum of p,p'' & o,p'' isomers'", want: "CharacteristicName eq 'DDT/DDD/DDE, sum of p,p'' & o,p'' isomers'"},
		{coll: Observations, filter: "CharacteristicName in ('pH', 'Titanium','Temperature, water')", want: "CharacteristicName in ('pH','Titanium','Temperature, water')"},
		{coll: Observations, filter: "endswith(DOI, '7cny-7h34')", want: "endswith(DOI,'7cny-7h34')"},
		{coll: Observations, filter: "startswith(CharacteristicName,'Tit') or contains(DOI,'25976')", want: "startswith(CharacteristicName,'Tit') or contains(DOI,'25976')"},
		{coll: Observations, filter: "LocationId eq 5 and CharacteristicName eq 'pH' or RegionId eq 'hub.atlantic'", want: "(LocationId eq '5' and CharacteristicName eq 'pH') or RegionId eq 'hub.atlantic'"},
		{coll: Observations, filter: "LocationId eq 5 and (CharacteristicName eq 'pH' or RegionId eq 'hub.atlantic')", want: "LocationId eq '5' and (CharacteristicName eq 'pH' or RegionId eq 'hub.atlantic')"},
		{coll: Observations, filter: "((DOI eq 'a')) AND (DOI ne 'b' OR DOI ne 'c')", want: "DOI eq 'a' and (DOI ne 'b' or DOI ne 'c')"},
		{coll: Observations, filter: "  ", want: ""},
		{coll: Locations, filter: "Id eq 12", want: "Id eq '12'"},
		{coll: Locations, filter: "Name eq 'Bow River'", want: "Name eq 'Bow River'"},

		{coll: Observations, filter: "Foo eq 1", err: `unknown field "Foo"`},
		{coll: Observations, filter: "DatasetName eq 'x'", err: "DatasetName is not filterable on /Observations"},
		{coll: Observations, filter: "Latitude gt 5", err: "Latitude is not filterable on /Observations"},
		{coll: Observations, filter: "ResultValue gt 5", err: "ResultValue is not filterable"},
		{coll: Observations, filter: "LocationId eq 'abc'", err: "LocationId needs an integer"},
		{coll: Locations, filter: "Latitude gt 'north'", err: "Latitude needs a number"},
		{coll: Locations, filter: "Latitude gt 'NaN'", err: "Latitude needs a number"},
		{coll: Metadata, filter: "CreateTimestamp gt 'yesterday'", err: "CreateTimestamp needs a date"},
		{coll: Metadata, filter: "Id eq 'not-a-uuid'", err: "Id needs a UUID"},
		{coll: Observations, filter: "RegionId gt 'hub'", err: "RegionId supports only eq, ne and in"},
		{coll: Observations, filter: "endswith(LocationId, '5')", err: "endswith applies to text fields"},
		{coll: Observations, filter: "DOI like 'x'", err: `unknown operator "like"`},
		{coll: Observations, filter: "not_a_fn(DOI)", err: `unknown function "not_a_fn" at position 1`},
		{coll: Observations, filter: "DOI eq 'x' and tolower(DOI) eq 'y'", err: `unknown function "tolower" at position 16`},
		{coll: Observations, filter: "Foo(DOI, 'x')", err: `unknown function "Foo"`},
		{coll: Observations, filter: "DOI eq 'x", err: "unterminated quoted literal"},
		{coll: Observations, filter: "DOI eq 'x' and", err: "expected a field name"},
		{coll: Observations, filter: "(DOI eq 'x'", err: "expected ')'"},
		{coll: Observations, filter: "DOI eq 'x')", err: "expected end of filter"},
		{coll: Observations, filter: "DOI in ()", err: "expected a value for DOI"},
		{coll: Observations, filter: "DOI in ('a' 'b')", err: "expected ',' or ')'"},
		{coll: Observations, filter: "DOI", err: "expected an operator after DOI"},
		{coll: Observations, filter: strings.Repeat("(", 40) + "DOI eq 'a'" + strings.Repeat(")", 40), err: "nested deeper"},
		{coll: Observations, filter: "DOI in (" + strings.Repeat("'a',", 300) + "'a')", err: "more than 256"},
	} {
		e, err := ParseFilter(c.coll, c.filter)
		if c.err != "" {
			var qe *Error
			if !errors.As(err, &qe) || !strings.Contains(qe.Detail, c.err) {
				t.Errorf("%s %q: err = %v, want one containing %q", c.coll.Name, c.filter, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %q: %v", c.coll.Name, c.filter, err)
			continue
		}
		if got := String(e); got != c.want {
			t.Errorf("%s %q: canonical %q, want %q", c.coll.Name, c.filter, got, c.want)
		}
	}
}

func TestParse(t *testing.T) {
	params := func(raw string) []Param {
		p, err := Decode([]byte(raw))
		if err != nil {
			t.Fatalf("Decode(%q): %v", raw, err)
		}
		return p
	}
	for _, c := range []struct {
		coll      *Collection
		raw       string
		top       int
		after     Key
		count     bool
		fields    string // comma-joined selected names
		next      string // AppendNextQuery with last key 99 (or a UUID on Metadata)
		err       string
		fieldsAll bool
		format    string
	}{
		{coll: Records, raw: "%24top=1000&%24filter=CharacteristicName+eq+%27Titanium%27&%24skiptoken=Id%3A18085958",
			top: 1000, after: Key{Int: 18085958}, fieldsAll: true,
			next: "$skiptoken=Id%3A99&$top=1000&$filter=CharacteristicName%20eq%20'Titanium'"},
		{coll: Observations, raw: "$select=Id, DOI,LocationId&$filter=&$count=&$orderby=&$skiptoken=",
			top: DefaultTop, fields: "Id,DOI,LocationId", next: "$skiptoken=Id%3A99&$top=10000&$select=Id,%20DOI,LocationId"},
		{coll: Observations, raw: "$select=LocationId,Id&cachebust=1&$top=5",
			top: 5, fields: "Id,LocationId", next: "$skiptoken=Id%3A99&$top=5&$select=LocationId,Id&cachebust=1"},
		{coll: Observations, raw: "$count=true&$top=3&$select=Id", top: 3, count: true, fields: "Id",
			next: "$skiptoken=Id%3A99&$top=3&$count=true&$select=Id"},
		{coll: Observations, raw: "$count=FALSE", top: DefaultTop, fieldsAll: true, next: "$skiptoken=Id%3A99&$top=10000&$count=FALSE"},
		{coll: Observations, raw: "$top=10&$top=10", top: 10, fieldsAll: true, next: "$skiptoken=Id%3A99&$top=10"},
		{coll: Metadata, raw: "$skiptoken=Id:5C8B3F1A-1234-4ABC-9DEF-0123456789AB&$select=*", top: DefaultTop,
			after: Key{UUID: "5c8b3f1a-1234-4abc-9def-0123456789ab"}, fieldsAll: true,
			next: "$skiptoken=Id%3A00000000-0000-0000-0000-000000000099&$top=10000&$select=*"},
		{coll: Observations, raw: "$format=json", top: DefaultTop, fieldsAll: true, format: FormatJSON, next: "$skiptoken=Id%3A99&$top=10000&$format=json"},
		{coll: Observations, raw: "$format=csv&$top=2", top: 2, fieldsAll: true, format: FormatCSV, next: "$skiptoken=Id%3A99&$top=2&$format=csv"},
		{coll: Locations, raw: "$format=text/csv", top: DefaultTop, fieldsAll: true, format: FormatCSV, next: "$skiptoken=Id%3A99&$top=10000&$format=text%2Fcsv"},
		{coll: Locations, raw: "$format=application/json;odata.metadata=minimal", top: DefaultTop, fieldsAll: true, format: FormatJSON,
			next: "$skiptoken=Id%3A99&$top=10000&$format=application%2Fjson%3Bodata.metadata%3Dminimal"},

		{coll: Observations, raw: "$top=0", err: "$top must be an integer from 1 to 10000"},
		{coll: Observations, raw: "$top=10001", err: "$top must be an integer from 1 to 10000"},
		{coll: Observations, raw: "$top=ten", err: "$top must be"},
		{coll: Observations, raw: "$top=1&$top=2", err: "given twice"},
		{coll: Observations, raw: "$skiptoken=5", err: "$skiptoken must look like Id:"},
		{coll: Observations, raw: "$skiptoken=Id:-5", err: "$skiptoken must be Id:<integer>"},
		{coll: Observations, raw: "$skiptoken=Id:99999999999999999999", err: "$skiptoken must be Id:<integer>"},
		{coll: Metadata, raw: "$skiptoken=Id:5", err: "must be Id:<uuid>"},
		{coll: Observations, raw: "$count=maybe", err: "$count must be true or false"},
		{coll: Observations, raw: "$orderby=Id", err: "$orderby is not supported"},
		{coll: Observations, raw: "$skip=10", err: "$skip is not supported"},
		{coll: Observations, raw: "$expand=x", err: "query option $expand is not supported"},
		{coll: Observations, raw: "$format=xml", err: `$format "xml" is not supported (json or csv)`},
		{coll: Observations, raw: "$select=Id,Bogus", err: `$select: unknown field "Bogus" for /Observations`},
		{coll: Observations, raw: "$select=DatasetName", err: `unknown field "DatasetName" for /Observations`},
	} {
		q, err := Parse(c.coll, params(c.raw))
		if c.err != "" {
			var qe *Error
			if !errors.As(err, &qe) || !strings.Contains(qe.Detail, c.err) {
				t.Errorf("%s?%s: err = %v, want one containing %q", c.coll.Name, c.raw, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s?%s: %v", c.coll.Name, c.raw, err)
			continue
		}
		if q.Top != c.top || q.After != c.after || q.Count != c.count || q.Format != c.format {
			t.Errorf("%s?%s: top %d after %+v count %v format %q", c.coll.Name, c.raw, q.Top, q.After, q.Count, q.Format)
		}
		var names []string
		for _, i := range q.Fields {
			names = append(names, c.coll.Fields[i].Name)
		}
		if c.fieldsAll {
			if len(q.Fields) != len(c.coll.Fields) {
				t.Errorf("%s?%s: %d fields, want all %d", c.coll.Name, c.raw, len(q.Fields), len(c.coll.Fields))
			}
		} else if got := strings.Join(names, ","); got != c.fields {
			t.Errorf("%s?%s: fields %s, want %s", c.coll.Name, c.raw, got, c.fields)
		}
		last := Key{Int: 99}
		if c.coll.UUIDKey {
			last = Key{UUID: "00000000-0000-0000-0000-000000000099"}
		}
		if got := string(q.AppendNextQuery(nil, last)); got != c.next {
			t.Errorf("%s?%s: next query\n got %s\nwant %s", c.coll.Name, c.raw, got, c.next)
		}
	}
}

// The next link of one page, decoded and parsed again, must give the same
// query with the new key: that is what every client relies on.
func TestNextLinkRoundTrip(t *testing.T) {
	raw := "$top=7&$filter=CharacteristicName+in+('a%2Cb'%2C'c%27%27d')+and+DOI+ne+'x%26y'&$select=Id,DOI&note=a%20b%2Bc"
	p, err := Decode([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(Observations, p)
	if err != nil {
		t.Fatal(err)
	}
	link := q.AppendNextQuery(nil, Key{Int: 42})
	if strings.ContainsAny(string(link), " +#") {
		t.Fatalf("next query %q holds a raw space, + or #", link)
	}
	p2, err := Decode(link)
	if err != nil {
		t.Fatal(err)
	}
	q2, err := Parse(Observations, p2)
	if err != nil {
		t.Fatal(err)
	}
	if q2.After.Int != 42 || q2.Top != 7 || String(q2.Filter) != String(q.Filter) || len(q2.Fields) != 2 {
		t.Fatalf("round trip changed the query: %+v vs %+v", q2, q)
	}
	if got := string(q2.AppendNextQuery(nil, Key{Int: 42})); got != string(link) {
		t.Fatalf("second link differs:\n%s\n%s", got, link)
	}
}

func TestCollectionsMatchSpec(t *testing.T) {
	// Field counts and the detection-limit order of odata-compat.md.
	for _, c := range []struct {
		coll *Collection
		n    int
	}{{Metadata, 23}, {Locations, 12}, {Observations, 34}, {Records, 44}} {
		if len(c.coll.Fields) != c.n {
			t.Errorf("%s has %d fields, want %d", c.coll.Name, len(c.coll.Fields), c.n)
		}
	}
	unit, _ := Observations.FieldIndex("ResultDetectionQuantitationLimitUnit")
	measure, _ := Observations.FieldIndex("ResultDetectionQuantitationLimitMeasure")
	if unit > measure {
		t.Error("Observations must put the detection limit Unit before Measure")
	}
	unit, _ = Records.FieldIndex("ResultDetectionQuantitationLimitUnit")
	measure, _ = Records.FieldIndex("ResultDetectionQuantitationLimitMeasure")
	if measure > unit {
		t.Error("Records must put the detection limit Measure before Unit")
	}
}
