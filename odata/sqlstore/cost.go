package sqlstore

import (
	"fmt"

	"github.com/sluicehq/sluice/odata/query"
)

// Prices of the filter cost model, in units of "one condition evaluated on
// one index entry". They follow how the statements of this package run: a
// filter is split into at most maxBranches alternatives (or and in), each
// read as a range of a (column, id) index that the other conditions of the
// alternative filter; an alternative with no indexable condition, or a
// filter too large to split, is a scan of the table in id order that
// evaluates every condition on every row it passes.
const (
	// CostRange is one index range scan: an alternative driven by eq, lt,
	// gt, le or ge on a filterable field (an in value is an alternative).
	CostRange = 4
	// CostFilter is a condition evaluated on the rows a range yields.
	CostFilter = 1
	// CostScan is a scan of the table in id order; CostScanTerm is each
	// condition it evaluates on every row (endswith, startswith, contains
	// and ne use no index, nor does anything in a filter too large to split).
	CostScan     = 16
	CostScanTerm = 8
)

// Cost prices the filter of q before any SQL runs. why explains the price in
// a sentence a client can act on.
func Cost(q *query.Query) (units int, why string) {
	if q.Filter == nil {
		return 0, "no $filter"
	}
	bs, ok := dnf(q.Filter)
	if !ok || len(bs) > maxBranches {
		n := terms(q.Filter)
		return CostScan + CostScanTerm*n, fmt.Sprintf(
			"it has more than %d alternatives (or, in), so it cannot be read as index ranges: its %d conditions are evaluated on every row of a scan (%d + %d per condition)",
			maxBranches, n, CostScan, CostScanTerm)
	}
	ranges, scans, scanTerms := 0, 0, 0
	for _, b := range bs {
		if indexable(b) {
			ranges++
			units += CostRange + CostFilter*(len(b)-1)
			continue
		}
		scans++
		scanTerms += len(b)
		units += CostScan + CostScanTerm*len(b)
	}
	why = fmt.Sprintf("%d index range(s) at %d each plus %d per further condition", ranges, CostRange, CostFilter)
	if scans > 0 {
		why += fmt.Sprintf(", and %d alternative(s) with no indexable condition (only endswith, startswith, contains or ne) read by scanning the table: %d + %d per condition, %d condition(s)",
			scans, CostScan, CostScanTerm, scanTerms)
	}
	return units, why
}

// indexable reports whether one condition of a conjunction can drive an
// index range scan.
func indexable(conj []query.Expr) bool {
	for _, e := range conj {
		if c, ok := e.(*query.Compare); ok && c.Op != query.OpNe {
			return true
		}
	}
	return false
}

// terms counts the conditions of a filter, an in list counting one per value.
func terms(e query.Expr) int {
	switch e := e.(type) {
	case *query.And:
		n := 0
		for _, a := range e.Args {
			n += terms(a)
		}
		return n
	case *query.Or:
		n := 0
		for _, a := range e.Args {
			n += terms(a)
		}
		return n
	case *query.In:
		return max(1, len(e.Values))
	}
	return 1
}
