package alloc_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/alloc"
)

func TestEntries(t *testing.T) {
	t.Parallel()
	e := func(kv ...string) []engine.Entry {
		var out []engine.Entry
		for i := 0; i < len(kv); i += 2 {
			out = append(out, engine.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	bucket := map[string]string{"tenant": "acme", "path": "/api", "env": "prod"}
	cases := []struct {
		name   string
		bucket map[string]string
		order  []string
		want   []engine.Entry
	}{
		{"one key", map[string]string{"name": "b"}, nil, e("name", "b")},
		{"sorted by default", bucket, nil, e("env", "prod", "path", "/api", "tenant", "acme")},
		{"configured order", bucket, []string{"tenant", "path", "env"}, e("tenant", "acme", "path", "/api", "env", "prod")},
		{"configured first, the rest sorted", bucket, []string{"tenant"}, e("tenant", "acme", "env", "prod", "path", "/api")},
		{"names the bucket lacks are skipped", bucket, []string{"region", "path"}, e("path", "/api", "env", "prod", "tenant", "acme")},
		{"a name twice counts once", bucket, []string{"path", "path", "env"}, e("path", "/api", "env", "prod", "tenant", "acme")},
		{"byte order", map[string]string{"b": "1", "B": "2", "a": "3"}, nil, e("B", "2", "a", "3", "b", "1")},
		{"empty", map[string]string{}, []string{"x"}, e()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := alloc.BucketOf(c.bucket).Entries(c.order)
			if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
}

func TestBucketOf(t *testing.T) {
	t.Parallel()
	a := map[string]string{"name": "b", "env": "prod"}
	b := map[string]string{"env": "prod", "name": "b"}
	if alloc.BucketOf(a) != alloc.BucketOf(b) {
		t.Fatalf("one bucket, two keys: %q %q", alloc.BucketOf(a), alloc.BucketOf(b))
	}
	// Maps that a naive join would confuse.
	distinct := []map[string]string{
		{"a": "b:c"},
		{"a:b": "c"},
		{"a": "b", "c": ""},
		{"a": "b1:c"},
		{"a": "b", "1:c": "d"},
		{"ab": "c"},
		{"a": "bc"},
		{},
	}
	seen := map[alloc.BucketID]int{}
	for i, m := range distinct {
		k := alloc.BucketOf(m)
		if j, dup := seen[k]; dup {
			t.Fatalf("maps %v and %v share the key %q", distinct[j], m, k)
		}
		seen[k] = i
	}
}

// FuzzBucketOf: two maps have the same BucketID exactly when they are
// equal, and a BucketID reads back as its map.
func FuzzBucketOf(f *testing.F) {
	f.Add("a", "b:c", "a:b", "c")
	f.Add("a", "b", "a", "b")
	f.Add("1", "2:3", "1", "2")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		m1 := map[string]string{k1: v1, "x": v2}
		m2 := map[string]string{k2: v2, "x": v1}
		equal := len(m1) == len(m2)
		for k, v := range m1 {
			if w, ok := m2[k]; !ok || w != v {
				equal = false
			}
		}
		if (alloc.BucketOf(m1) == alloc.BucketOf(m2)) != equal {
			t.Fatalf("%v and %v: keys %q and %q", m1, m2, alloc.BucketOf(m1), alloc.BucketOf(m2))
		}
		for _, m := range []map[string]string{m1, m2} {
			b := alloc.BucketOf(m)
			if got := b.Map(); !maps.Equal(got, m) {
				t.Fatalf("%q reads back as %v, want %v", b, got, m)
			}
			if b.Len() != len(m) {
				t.Fatalf("%q has %d entries, want %d", b, b.Len(), len(m))
			}
		}
	})
}

// FuzzBucketOfPairs: pairs make the BucketID of the map they fill in
// order, a later pair of a key replacing an earlier one.
func FuzzBucketOfPairs(f *testing.F) {
	f.Add("a", "1", "b", "2", "a", "3")
	f.Add("x", "", "x", "y", "", "z")
	f.Add("10:", "2:3", "1", "0:", "10:", "")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		pairs := []alloc.Pair{{k1, v1}, {k2, v2}, {k3, v3}}
		m := map[string]string{}
		for _, p := range pairs {
			m[p.Key] = p.Value
		}
		if got, want := alloc.BucketOfPairs(pairs), alloc.BucketOf(m); got != want {
			t.Fatalf("pairs %v give %q, the map %v gives %q", pairs, got, m, want)
		}
	})
}

// TestBucketIDMalformed: a string not made by BucketOf reads as the
// entries before what is wrong in it, and nothing crashes.
func TestBucketIDMalformed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want map[string]string
	}{
		{"", map[string]string{}},
		{"1:a1:b", map[string]string{"a": "b"}},
		{"1:a1:b5:c", map[string]string{"a": "b"}},
		{"1:a", map[string]string{}},
		{"x:a1:b", map[string]string{}},
		{"-1:a1:b", map[string]string{}},
		{"1:a1:b:", map[string]string{"a": "b"}},
		{"99999999999999999999:a", map[string]string{}},
	} {
		if got := alloc.BucketID(c.in).Map(); !maps.Equal(got, c.want) {
			t.Errorf("%q reads as %v, want %v", c.in, got, c.want)
		}
	}
}
