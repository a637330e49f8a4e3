package query

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Expr is a node of a parsed $filter: *And, *Or, *Compare, *In or *Match.
type Expr interface {
	// appendTo appends the canonical text of the node; parsing that text
	// gives the same tree, which the fuzz target checks.
	appendTo(b []byte) []byte
}

// And is true when every argument is.
type And struct{ Args []Expr }

// Or is true when any argument is.
type Or struct{ Args []Expr }

// Op is a comparison operator.
type Op uint8

// Comparison operators. lte/gte are accepted as spellings of le/ge.
const (
	OpEq Op = iota + 1
	OpNe
	OpLt
	OpGt
	OpLe
	OpGe
)

var opNames = [...]string{OpEq: "eq", OpNe: "ne", OpLt: "lt", OpGt: "gt", OpLe: "le", OpGe: "ge"}

func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

var opByWord = map[string]Op{
	"eq": OpEq, "ne": OpNe, "lt": OpLt, "gt": OpGt,
	"le": OpLe, "ge": OpGe, "lte": OpLe, "gte": OpGe,
}

// Compare is `Field Op Value`.
type Compare struct {
	Field string
	Op    Op
	Value Literal
}

// In is `Field in (Values...)`.
type In struct {
	Field  string
	Values []Literal
}

// Func is a string function usable in $filter.
type Func uint8

// String functions.
const (
	FuncEndsWith Func = iota + 1
	FuncStartsWith
	FuncContains
)

var funcNames = [...]string{FuncEndsWith: "endswith", FuncStartsWith: "startswith", FuncContains: "contains"}

func (f Func) String() string {
	if int(f) < len(funcNames) && funcNames[f] != "" {
		return funcNames[f]
	}
	return "func(" + strconv.Itoa(int(f)) + ")"
}

var funcByWord = map[string]Func{"endswith": FuncEndsWith, "startswith": FuncStartsWith, "contains": FuncContains}

// Match is `Func(Field, Value)`.
type Match struct {
	Func  Func
	Field string
	Value Literal
}

// Literal is a $filter value converted to its field's type: Text for text,
// UUID, region and instant fields (instants in stored form), Int or Float for
// numbers.
type Literal struct {
	Type  LitType
	Text  string
	Int   int64
	Float float64
}

// Value returns the literal as a Go value for a database driver.
func (l Literal) Value() any {
	switch l.Type {
	case LitInt:
		return l.Int
	case LitFloat:
		return l.Float
	}
	return l.Text
}

func (l Literal) appendTo(b []byte) []byte {
	var s string
	switch l.Type {
	case LitInt:
		s = strconv.FormatInt(l.Int, 10)
	case LitFloat:
		s = strconv.FormatFloat(l.Float, 'g', -1, 64)
	default:
		s = l.Text
	}
	b = append(b, '\'')
	b = append(b, strings.ReplaceAll(s, "'", "''")...)
	return append(b, '\'')
}

func (e *And) appendTo(b []byte) []byte { return appendJoined(b, e.Args, " and ", true) }
func (e *Or) appendTo(b []byte) []byte  { return appendJoined(b, e.Args, " or ", false) }

func appendJoined(b []byte, args []Expr, sep string, parenOr bool) []byte {
	for i, a := range args {
		if i > 0 {
			b = append(b, sep...)
		}
		_, isOr := a.(*Or)
		_, isAnd := a.(*And)
		// Nested nodes of the same kind are flattened by the parser, so only
		// an or under an and needs parentheses; an and under an or binds
		// tighter already, but is bracketed for readability when nested.
		if (parenOr && isOr) || (!parenOr && isAnd) {
			b = append(b, '(')
			b = a.appendTo(b)
			b = append(b, ')')
			continue
		}
		b = a.appendTo(b)
	}
	return b
}

func (e *Compare) appendTo(b []byte) []byte {
	b = append(b, e.Field...)
	b = append(b, ' ')
	b = append(b, e.Op.String()...)
	b = append(b, ' ')
	return e.Value.appendTo(b)
}

func (e *In) appendTo(b []byte) []byte {
	b = append(b, e.Field...)
	b = append(b, " in ("...)
	for i, v := range e.Values {
		if i > 0 {
			b = append(b, ',')
		}
		b = v.appendTo(b)
	}
	return append(b, ')')
}

func (e *Match) appendTo(b []byte) []byte {
	b = append(b, e.Func.String()...)
	b = append(b, '(')
	b = append(b, e.Field...)
	b = append(b, ',')
	b = e.Value.appendTo(b)
	return append(b, ')')
}

// Fields calls fn with the field of every condition of e, in order.
func Fields(e Expr, fn func(field string)) {
	switch e := e.(type) {
	case *And:
		for _, a := range e.Args {
			Fields(a, fn)
		}
	case *Or:
		for _, a := range e.Args {
			Fields(a, fn)
		}
	case *Compare:
		fn(e.Field)
	case *In:
		fn(e.Field)
	case *Match:
		fn(e.Field)
	}
}

// String returns the canonical text of a filter.
func String(e Expr) string {
	if e == nil {
		return ""
	}
	return string(e.appendTo(nil))
}

// Limits that keep a hostile filter from costing more than a page of rows.
const (
	maxFilterDepth = 32
	maxFilterTerms = 256
	maxFilterBytes = 16 << 10
)

// ParseFilter parses and validates a $filter expression for a collection.
// An empty or blank expression gives a nil Expr.
func ParseFilter(c *Collection, s string) (Expr, error) {
	if len(s) > maxFilterBytes {
		return nil, errorf("$filter is longer than %d bytes", maxFilterBytes)
	}
	p := &parser{c: c, src: s}
	p.next()
	if p.tok.kind == tEOF {
		return nil, nil
	}
	e, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tEOF {
		return nil, p.unexpected("end of filter")
	}
	return e, nil
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tWord
	tQuoted
	tLParen
	tRParen
	tComma
)

type token struct {
	kind tokKind
	text string
	pos  int
}

type parser struct {
	c     *Collection
	src   string
	off   int
	tok   token
	err   error
	terms int
}

// next reads one token into p.tok; a lexical error is kept in p.err and
// shows as an EOF token, so callers check p.err where they report.
func (p *parser) next() {
	s := p.src
	for p.off < len(s) && (s[p.off] == ' ' || s[p.off] == '\t' || s[p.off] == '\n' || s[p.off] == '\r') {
		p.off++
	}
	start := p.off
	if p.off >= len(s) {
		p.tok = token{kind: tEOF, pos: start}
		return
	}
	switch s[p.off] {
	case '(':
		p.off++
		p.tok = token{kind: tLParen, text: "(", pos: start}
		return
	case ')':
		p.off++
		p.tok = token{kind: tRParen, text: ")", pos: start}
		return
	case ',':
		p.off++
		p.tok = token{kind: tComma, text: ",", pos: start}
		return
	case '\'':
		var b strings.Builder
		p.off++
		for {
			if p.off >= len(s) {
				p.err = errorf("$filter: unterminated quoted literal starting at position %d", start+1)
				p.tok = token{kind: tEOF, pos: start}
				return
			}
			c := s[p.off]
			p.off++
			if c == '\'' {
				if p.off < len(s) && s[p.off] == '\'' {
					b.WriteByte('\'')
					p.off++
					continue
				}
				break
			}
			b.WriteByte(c)
		}
		p.tok = token{kind: tQuoted, text: b.String(), pos: start}
		return
	}
	for p.off < len(s) {
		switch s[p.off] {
		case ' ', '\t', '\n', '\r', '(', ')', ',', '\'':
			p.tok = token{kind: tWord, text: s[start:p.off], pos: start}
			return
		}
		p.off++
	}
	p.tok = token{kind: tWord, text: s[start:], pos: start}
}

func (p *parser) unexpected(want string) error {
	if p.err != nil {
		return p.err
	}
	if p.tok.kind == tEOF {
		return errorf("$filter: expected %s at end of filter", want)
	}
	return errorf("$filter: expected %s at position %d, found %q", want, p.tok.pos+1, p.tok.text)
}

func (p *parser) isWord(w string) bool {
	return p.tok.kind == tWord && strings.EqualFold(p.tok.text, w)
}

func (p *parser) or(depth int) (Expr, error) {
	first, args, err := p.junction(depth, "or", p.and)
	if err != nil || args == nil {
		return first, err
	}
	return &Or{Args: args}, nil
}

func (p *parser) and(depth int) (Expr, error) {
	first, args, err := p.junction(depth, "and", p.unary)
	if err != nil || args == nil {
		return first, err
	}
	return &And{Args: args}, nil
}

// junction parses operands joined by word ("or" or "and"). A single
// operand is returned as first; several as the arguments of one node,
// flattened (appendFlat).
func (p *parser) junction(depth int, word string, operand func(int) (Expr, error)) (first Expr, args []Expr, err error) {
	first, err = operand(depth)
	if err != nil || !p.isWord(word) {
		return first, nil, err
	}
	isOr := word == "or"
	args = appendFlat(nil, first, isOr)
	for p.isWord(word) {
		p.next()
		e, err := operand(depth)
		if err != nil {
			return nil, nil, err
		}
		args = appendFlat(args, e, isOr)
	}
	return first, args, nil
}

// appendFlat adds e to args, splicing in the arguments of a node of the same
// kind, so that (a or b) or c and a or b or c give the same tree.
func appendFlat(args []Expr, e Expr, or bool) []Expr {
	if or {
		if o, ok := e.(*Or); ok {
			return append(args, o.Args...)
		}
	} else if a, ok := e.(*And); ok {
		return append(args, a.Args...)
	}
	return append(args, e)
}

func (p *parser) term() error {
	p.terms++
	if p.terms > maxFilterTerms {
		return errorf("$filter has more than %d conditions and values", maxFilterTerms)
	}
	return nil
}

func (p *parser) unary(depth int) (Expr, error) {
	if depth >= maxFilterDepth {
		return nil, errorf("$filter is nested deeper than %d levels", maxFilterDepth)
	}
	switch p.tok.kind {
	case tLParen:
		p.next()
		e, err := p.or(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tRParen {
			return nil, p.unexpected("')'")
		}
		p.next()
		return e, nil
	case tWord:
	default:
		return nil, p.unexpected("a field name or '('")
	}
	word := p.tok
	p.next()
	if p.tok.kind == tLParen {
		// A word followed by '(' is a function call, never a field: no
		// comparison starts with a parenthesis after the field name.
		if fn, ok := funcByWord[strings.ToLower(word.text)]; ok {
			return p.match(fn)
		}
		return nil, errorf("$filter: unknown function %q at position %d (use endswith, startswith or contains)", word.text, word.pos+1)
	}
	lt, field, err := p.field(word)
	if err != nil {
		return nil, err
	}
	if err := p.term(); err != nil {
		return nil, err
	}
	if p.tok.kind != tWord {
		return nil, p.unexpected("an operator after " + field)
	}
	opWord := strings.ToLower(p.tok.text)
	if opWord == "in" {
		p.next()
		return p.in(field, lt)
	}
	op, ok := opByWord[opWord]
	if !ok {
		return nil, errorf("$filter: unknown operator %q after %s (use eq, ne, lt, gt, le, ge, lte, gte or in)", p.tok.text, field)
	}
	if op != OpEq && op != OpNe && (lt == LitRegion || lt == LitUUID) {
		return nil, errorf("$filter: %s supports only eq, ne and in, not %s", field, p.tok.text)
	}
	p.next()
	v, err := p.literal(field, lt)
	if err != nil {
		return nil, err
	}
	return &Compare{Field: field, Op: op, Value: v}, nil
}

func (p *parser) field(tok token) (LitType, string, error) {
	lt, canon, ok := p.c.Filterable(tok.text)
	if ok {
		return lt, canon, nil
	}
	if _, known := p.c.FieldIndex(tok.text); known || isFieldOfAny(tok.text) {
		return 0, "", errorf("$filter: field %s is not filterable on /%s", tok.text, p.c.Name)
	}
	return 0, "", errorf("$filter: unknown field %q at position %d", tok.text, tok.pos+1)
}

func isFieldOfAny(name string) bool {
	for _, c := range Collections {
		if _, ok := c.FieldIndex(name); ok {
			return true
		}
		if _, _, ok := c.Filterable(name); ok {
			return true
		}
	}
	return false
}

func (p *parser) in(field string, lt LitType) (Expr, error) {
	if p.tok.kind != tLParen {
		return nil, p.unexpected("'(' after in")
	}
	p.next()
	out := &In{Field: field}
	for {
		if len(out.Values) > 0 {
			if err := p.term(); err != nil {
				return nil, err
			}
		}
		v, err := p.literal(field, lt)
		if err != nil {
			return nil, err
		}
		out.Values = append(out.Values, v)
		if p.tok.kind == tComma {
			p.next()
			continue
		}
		if p.tok.kind == tRParen {
			p.next()
			return out, nil
		}
		return nil, p.unexpected("',' or ')' in the list of " + field)
	}
}

func (p *parser) match(fn Func) (Expr, error) {
	p.next() // '('
	if p.tok.kind != tWord {
		return nil, p.unexpected("a field name in " + fn.String())
	}
	lt, field, err := p.field(p.tok)
	if err != nil {
		return nil, err
	}
	if lt != LitText {
		return nil, errorf("$filter: %s applies to text fields, not %s", fn, field)
	}
	if err := p.term(); err != nil {
		return nil, err
	}
	p.next()
	if p.tok.kind != tComma {
		return nil, p.unexpected("',' in " + fn.String())
	}
	p.next()
	v, err := p.literal(field, lt)
	if err != nil {
		return nil, err
	}
	if p.tok.kind != tRParen {
		return nil, p.unexpected("')' closing " + fn.String())
	}
	p.next()
	return &Match{Func: fn, Field: field, Value: v}, nil
}

func (p *parser) literal(field string, lt LitType) (Literal, error) {
	if p.tok.kind != tWord && p.tok.kind != tQuoted {
		return Literal{}, p.unexpected("a value for " + field)
	}
	raw := p.tok.text
	p.next()
	return convertLiteral(field, lt, raw)
}

func convertLiteral(field string, lt LitType, raw string) (Literal, error) {
	switch lt {
	case LitInt:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64)
		if err != nil {
			return Literal{}, errorf("$filter: %s needs an integer, got %q", field, raw)
		}
		return Literal{Type: lt, Int: n}, nil
	case LitFloat:
		s := strings.TrimSpace(raw)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || strings.ContainsAny(s, "xXpP_") {
			return Literal{}, errorf("$filter: %s needs a number, got %q", field, raw)
		}
		return Literal{Type: lt, Float: f}, nil
	case LitInstant:
		ts, ok := ParseInstant(strings.TrimSpace(raw))
		if !ok {
			return Literal{}, errorf("$filter: %s needs a date (2020-03-23) or a timestamp (2020-03-23T10:00:00Z), got %q", field, raw)
		}
		return Literal{Type: lt, Text: ts}, nil
	case LitUUID:
		u, ok := ParseUUID(strings.TrimSpace(raw))
		if !ok {
			return Literal{}, errorf("$filter: %s needs a UUID, got %q", field, raw)
		}
		return Literal{Type: lt, Text: u}, nil
	case LitRegion:
		if raw == "" {
			return Literal{}, errorf("$filter: %s needs a region such as 'hub.atlantic'", field)
		}
		return Literal{Type: lt, Text: raw}, nil
	}
	return Literal{Type: LitText, Text: raw}, nil
}

// TimestampLayout is the stored and returned form of timestamps.
const TimestampLayout = "2006-01-02T15:04:05.000Z"

var instantLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
}

// ParseInstant accepts a date or a date-time (UTC when no offset is given)
// and returns it in TimestampLayout. A date means its midnight UTC.
func ParseInstant(s string) (string, bool) {
	if len(s) == 10 {
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return "", false
		}
		return t.UTC().Format(TimestampLayout), true
	}
	for _, l := range instantLayouts {
		if t, err := time.Parse(l, s); err == nil {
			t = t.UTC()
			if t.Year() < 0 || t.Year() > 9999 {
				return "", false
			}
			return t.Format(TimestampLayout), true
		}
	}
	return "", false
}

// FormatUUID writes 16 bytes as a version 4 (random) UUID in lower case,
// setting the version and variant bits.
func FormatUUID(b [16]byte) string {
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	const hex = "0123456789abcdef"
	out := make([]byte, 0, 36)
	for i, c := range b {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out = append(out, '-')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return string(out)
}

// ParseUUID accepts the 8-4-4-4-12 hexadecimal form and returns it in lower case.
func ParseUUID(s string) (string, bool) {
	if len(s) != 36 {
		return "", false
	}
	b := []byte(s)
	for i, c := range b {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", false
			}
			continue
		}
		switch {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
		case 'A' <= c && c <= 'F':
			b[i] = c + 'a' - 'A'
		default:
			return "", false
		}
	}
	return string(b), true
}

// Error is a request that was decoded but is not valid: an unknown field, a
// bad filter, $top out of range. Detail names the field or token.
type Error struct{ Detail string }

func (e *Error) Error() string { return e.Detail }

func errorf(format string, args ...any) error {
	return &Error{Detail: fmt.Sprintf(format, args...)}
}
