package query

import (
	"math"
	"strconv"
	"strings"
)

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
