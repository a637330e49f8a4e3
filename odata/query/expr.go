package query

import (
	"strconv"
	"strings"
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
