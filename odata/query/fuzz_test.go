package query

import (
	"errors"
	"testing"
)

// FuzzFilter: the parser never panics, every error is a *Error, and the
// canonical text of a parsed filter parses to the same canonical text.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		"LocationId eq '3271776'",
		"CharacteristicName eq 'Titanium' and ActivityStartYear gt 2015",
		"(RegionId eq 'hub.atlantic' or RegionId eq 'admin.4.ca.bc') and DOI ne 'x'",
		"CharacteristicName in ('a,b','c''d')",
		"endswith(DOI, '7h34') or startswith(CharacteristicName,'Ti') or contains(DOI,'x')",
		"CreateTimestamp gt 2020-03-23 and Id eq '5c8b3f1a-1234-4abc-9def-0123456789ab'",
		"Longitude gt '-102.01' and Latitude lte 60.5",
		"((((DOI eq 'a'))))",
		"not_a_fn(DOI)", "tolower(DOI) eq 'x'", "DOI(",
		"DOI eq 'unterminated",
		"", "and", "(", ")", "''", "in (", "eq eq eq",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []*Collection{Metadata, Locations, Observations} {
			e, err := ParseFilter(c, s)
			if err != nil {
				var qe *Error
				if !errors.As(err, &qe) {
					t.Fatalf("error %v is not a *Error", err)
				}
				continue
			}
			canon := String(e)
			e2, err := ParseFilter(c, canon)
			if err != nil {
				t.Fatalf("canonical %q of %q does not parse: %v", canon, s, err)
			}
			if again := String(e2); again != canon {
				t.Fatalf("canonical form not stable: %q -> %q", canon, again)
			}
		}
	})
}

// FuzzSkiptoken: a token either fails with a *Error or reads back to itself.
func FuzzSkiptoken(f *testing.F) {
	for _, s := range []string{"Id:0", "Id:18085958", "Id:9223372036854775807", "Id:9223372036854775808",
		"Id:-1", "Id:", "id:5", "Id:5c8b3f1a-1234-4abc-9def-0123456789ab", "Id: 5", "Id:+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []*Collection{Metadata, Observations} {
			k, err := ParseSkiptoken(c, s)
			if err != nil {
				var qe *Error
				if !errors.As(err, &qe) {
					t.Fatalf("error %v is not a *Error", err)
				}
				continue
			}
			k2, err := ParseSkiptoken(c, k.Token())
			if err != nil || k2 != k {
				t.Fatalf("token %q -> %+v -> %q -> %+v, %v", s, k, k.Token(), k2, err)
			}
		}
	})
}

// FuzzDecode: decoding never panics; a decoded pair escaped for a link
// decodes back to itself.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"%24top=10&%24filter=A+eq+%27x%27", "$skiptoken=Id%3A5", "%zz", "a=%E2%82", "&&=&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := Decode([]byte(s))
		if err != nil {
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		for _, p := range ps {
			enc := AppendEscaped(nil, p.Name)
			enc = append(enc, '=')
			enc = AppendEscaped(enc, p.Value)
			back, err := Decode(enc)
			if err != nil {
				t.Fatalf("re-encoded %q does not decode: %v", enc, err)
			}
			if p.Name == "" && p.Value == "" {
				continue
			}
			if len(back) != 1 || back[0] != p {
				t.Fatalf("%+v -> %q -> %+v", p, enc, back)
			}
		}
	})
}
