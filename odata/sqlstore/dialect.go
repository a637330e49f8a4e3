package sqlstore

import (
	"strconv"
	"strings"
)

// dialect holds the few places where PostgreSQL and SQLite SQL differ.
type dialect struct {
	name string
	pg   bool
}

var (
	postgresDialect = dialect{name: "postgres", pg: true}
	sqliteDialect   = dialect{name: "sqlite"}
)

func (d dialect) appendPlaceholder(b []byte, n int) []byte {
	if d.pg {
		b = append(b, '$')
	} else {
		b = append(b, '?')
	}
	return strconv.AppendInt(b, int64(n), 10)
}

func (d dialect) typeName(t colType) string {
	switch t {
	case tInt:
		if d.pg {
			return "BIGINT"
		}
		return "INTEGER"
	case tFloat:
		if d.pg {
			return "DOUBLE PRECISION"
		}
		return "REAL"
	}
	if d.pg {
		// Byte order, like SQLite's BINARY collation: both stores sort
		// and compare text the same way, and B-tree comparisons are cheap.
		return `TEXT COLLATE "C"`
	}
	return "TEXT"
}

func (d dialect) createTable(t *table) string {
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS ")
	b.WriteString(t.name)
	b.WriteString(" (")
	for i, c := range t.cols {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c.name)
		b.WriteByte(' ')
		b.WriteString(d.typeName(c.typ))
		if !c.null {
			b.WriteString(" NOT NULL")
		}
	}
	b.WriteString(", PRIMARY KEY (")
	b.WriteString(strings.Join(t.pk, ", "))
	b.WriteString("))")
	return b.String()
}

func (d dialect) createIndex(t *table, ix index) string {
	u := ""
	if ix.unique {
		u = "UNIQUE "
	}
	return "CREATE " + u + "INDEX IF NOT EXISTS " + ix.name + " ON " + t.name + " (" + strings.Join(ix.cols, ", ") + ")"
}

// octetLength is the byte length of a text expression.
func (d dialect) octetLength(expr string) string {
	if d.pg {
		return "octet_length(" + expr + ")"
	}
	return "length(CAST(" + expr + " AS BLOB))"
}
