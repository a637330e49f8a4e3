package query

import (
	"strconv"
	"strings"
)

// Page size limits. The clients always send $top; when a request omits it,
// a page holds DefaultTop rows, the most a page may hold.
const (
	MaxTop     = 10000
	DefaultTop = MaxTop
)

// Key is the Id of a row as used for keyset paging: Int for locations,
// observations and records, UUID for metadata. The zero Key is before every
// row (integer Ids start at 1, and every UUID sorts after "").
type Key struct {
	Int  int64
	UUID string
}

// Token returns the $skiptoken form of the key, Id:<n> or Id:<uuid>.
func (k Key) Token() string {
	if k.UUID != "" {
		return "Id:" + k.UUID
	}
	return "Id:" + strconv.FormatInt(k.Int, 10)
}

// ParseSkiptoken reads a $skiptoken for a collection: Id:<n> with a
// non-negative integer, or Id:<uuid> on /Metadata.
func ParseSkiptoken(c *Collection, s string) (Key, error) {
	rest, ok := strings.CutPrefix(s, "Id:")
	if !ok {
		return Key{}, errorf("$skiptoken must look like Id:<last Id>, got %q", s)
	}
	if c.UUIDKey {
		u, ok := ParseUUID(rest)
		if !ok {
			return Key{}, errorf("$skiptoken on /%s must be Id:<uuid>, got %q", c.Name, s)
		}
		return Key{UUID: u}, nil
	}
	if rest == "" || len(rest) > 19 {
		return Key{}, errorf("$skiptoken must be Id:<integer>, got %q", s)
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] < '0' || rest[i] > '9' {
			return Key{}, errorf("$skiptoken must be Id:<integer>, got %q", s)
		}
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil {
		return Key{}, errorf("$skiptoken must be Id:<integer>, got %q", s)
	}
	return Key{Int: n}, nil
}

// Query is a validated request for one collection.
type Query struct {
	Collection *Collection
	// Fields are the selected positions in Collection.Fields, ascending:
	// rows always follow the collection's field order.
	Fields []int
	// Filter is nil when the request has none.
	Filter Expr
	Top    int
	// After is the $skiptoken: the page starts after this key.
	After Key
	// Count asks for the number of matching rows instead of rows.
	Count bool
	// Format is what $format asked for: FormatJSON, FormatCSV, or ""
	// when not given (the Accept header decides).
	Format string

	// carry is every other option of the request, for the next link.
	carry []Param
}

// Parse validates the decoded options of a request to collection c.
// Empty options mean "not given". Options that do not start with '$' are
// not interpreted but are carried into the next link.
func Parse(c *Collection, params []Param) (*Query, error) {
	q := &Query{Collection: c, Top: DefaultTop}
	var err error
	seen := make(map[string]string, len(params))
	var selectText, filterText, topText, tokenText, countText string
	for _, p := range params {
		if !strings.HasPrefix(p.Name, "$") {
			q.carry = append(q.carry, p)
			continue
		}
		if prev, dup := seen[p.Name]; dup {
			if prev != p.Value {
				return nil, errorf("query option %s is given twice with different values", p.Name)
			}
			continue
		}
		seen[p.Name] = p.Value
		if strings.TrimSpace(p.Value) == "" {
			continue
		}
		switch p.Name {
		case "$select":
			selectText = p.Value
		case "$filter":
			filterText = p.Value
		case "$top":
			topText = p.Value
			continue // always written by AppendNextQuery
		case "$skiptoken":
			tokenText = p.Value
			continue // replaced in the next link
		case "$count":
			countText = p.Value
		case "$format":
			if q.Format, err = parseFormat(p.Value); err != nil {
				return nil, err
			}
		case "$orderby", "$skip":
			return nil, errorf("%s is not supported: rows come in Id order; page with the next link ($skiptoken)", p.Name)
		default:
			return nil, errorf("query option %s is not supported (use $select, $filter, $top, $skiptoken, $count)", p.Name)
		}
		q.carry = append(q.carry, p)
	}

	if q.Fields, err = parseSelect(c, selectText); err != nil {
		return nil, err
	}
	if q.Filter, err = ParseFilter(c, filterText); err != nil {
		return nil, err
	}
	if topText != "" {
		n, err := strconv.Atoi(strings.TrimSpace(topText))
		if err != nil || n < 1 || n > MaxTop {
			return nil, errorf("$top must be an integer from 1 to %d, got %q", MaxTop, topText)
		}
		q.Top = n
	}
	if tokenText != "" {
		if q.After, err = ParseSkiptoken(c, tokenText); err != nil {
			return nil, err
		}
	}
	switch strings.ToLower(strings.TrimSpace(countText)) {
	case "", "false":
	case "true":
		q.Count = true
	default:
		return nil, errorf("$count must be true or false, got %q", countText)
	}
	return q, nil
}

// Response formats a request may ask for with $format.
const (
	FormatJSON = "json"
	FormatCSV  = "csv"
)

// parseFormat reads $format: json or csv, as a short name or a media type
// (parameters such as odata.metadata=minimal are allowed and ignored).
func parseFormat(v string) (string, error) {
	mt, _, _ := strings.Cut(v, ";")
	switch strings.ToLower(strings.TrimSpace(mt)) {
	case "json", "application/json":
		return FormatJSON, nil
	case "csv", "text/csv":
		return FormatCSV, nil
	}
	return "", errorf("$format %q is not supported (json or csv)", v)
}

// AllFields reports whether every field of the collection is selected.
func (q *Query) AllFields() bool { return len(q.Fields) == len(q.Collection.Fields) }

func parseSelect(c *Collection, s string) ([]int, error) {
	all := func() []int {
		out := make([]int, len(c.Fields))
		for i := range out {
			out[i] = i
		}
		return out
	}
	if strings.TrimSpace(s) == "" {
		return all(), nil
	}
	chosen := make([]bool, len(c.Fields))
	for _, item := range strings.Split(s, ",") {
		name := strings.TrimSpace(item)
		if name == "" {
			continue
		}
		if name == "*" {
			return all(), nil
		}
		i, ok := c.FieldIndex(name)
		if !ok {
			return nil, errorf("$select: unknown field %q for /%s", name, c.Name)
		}
		chosen[i] = true
	}
	var out []int
	for i, ok := range chosen {
		if ok {
			out = append(out, i)
		}
	}
	if len(out) == 0 {
		return all(), nil
	}
	return out, nil
}

// Page is what a store's probe decided about the page of a query, before
// any row is sent.
type Page struct {
	// Rows is the number of rows on the page, at most Top.
	Rows int
	// First and Last are the Ids of the first and last row (zero when the
	// page is empty).
	First, Last Key
	// More is true when a row exists after Last: the page gets a next link.
	More bool
}

// Value is one column of a row from a store. Which member is meaningful
// depends on the field's Kind: Int for KindInt, Float for KindFloat, Bytes
// for the others (text in final form, or a JSON document for KindJSON).
type Value struct {
	Null  bool
	Int   int64
	Float float64
	Bytes []byte
}

// Cursor streams the rows of a page in Id order. Values holds one Value
// per selected field and is valid until the next call to Next.
type Cursor interface {
	Next() bool
	Values() []Value
	Err() error
	// Close releases the database resources; it is safe to call twice.
	Close() error
}
