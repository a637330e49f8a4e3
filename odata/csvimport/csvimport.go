package csvimport

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/odata/internal/csvsafe"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
	"github.com/sluicehq/sluice/odata/values"
)

// Dataset is one dataset to import: its metadata file and its CSV files.
type Dataset struct {
	Metadata string
	CSV      []string
}

// Metadata is the content of a metadata file.
type Metadata struct {
	sqlstore.Dataset
	// Regions maps a MonitoringLocationID to its RegionId values (at most
	// one of each kind: admin.2.*, admin.4.*, hub.*).
	Regions map[string][]string `json:"Regions"`
}

// ReadMetadata reads and checks a metadata file. Unknown members are errors,
// so a misspelt field is not silently dropped.
func ReadMetadata(path string) (*Metadata, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Metadata
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if m.DOI == "" || m.DatasetName == "" {
		return nil, fmt.Errorf("%s: DOI and DatasetName are required", path)
	}
	for _, ts := range []struct{ name, v string }{{"CreateTimestamp", m.CreateTimestamp}, {"PublishedTimestamp", m.PublishedTimestamp}} {
		if _, ok := query.ParseInstant(ts.v); !ok {
			return nil, fmt.Errorf("%s: %s %q is not a date or timestamp", path, ts.name, ts.v)
		}
	}
	return &m, nil
}

// Import validates and loads datasets in one transaction. progress (may be
// nil) receives bytes of CSV read so far and the total over both passes.
func Import(ctx context.Context, db *sqlstore.DB, sets []Dataset, progress func(done, total int64)) (sqlstore.LoadResult, error) {
	schema, err := values.Load()
	if err != nil {
		return sqlstore.LoadResult{}, err
	}
	var total int64
	for _, s := range sets {
		for _, p := range s.CSV {
			fi, err := os.Stat(p)
			if err != nil {
				return sqlstore.LoadResult{}, err
			}
			total += 2 * fi.Size()
		}
	}
	pr := &progressCounter{total: total, fn: progress}
	plans := make([]*plan, len(sets))
	dois := map[string]string{}
	for i, s := range sets {
		m, err := ReadMetadata(s.Metadata)
		if err != nil {
			return sqlstore.LoadResult{}, err
		}
		if prev, dup := dois[m.DOI]; dup {
			return sqlstore.LoadResult{}, fmt.Errorf("%s: DOI %s is also the DOI of %s", s.Metadata, m.DOI, prev)
		}
		dois[m.DOI] = s.Metadata
		p := &plan{meta: m, files: s.CSV, locs: map[string]*sqlstore.Location{}, v: schema}
		for _, f := range s.CSV {
			if err := p.scan(ctx, f, pr); err != nil {
				return sqlstore.LoadResult{}, err
			}
		}
		for id := range m.Regions {
			if p.locs[id] == nil {
				return sqlstore.LoadResult{}, fmt.Errorf("%s: Regions names location %q, which no CSV row has", s.Metadata, id)
			}
		}
		plans[i] = p
	}
	return db.Load(ctx, func(l *sqlstore.Loader) error {
		for _, p := range plans {
			if err := l.AddDataset(&p.meta.Dataset); err != nil {
				return fmt.Errorf("%s: %w", p.meta.DOI, err)
			}
			for _, id := range p.order {
				if err := l.AddLocation(p.locs[id]); err != nil {
					return err
				}
			}
			for _, f := range p.files {
				if err := p.load(ctx, l, f, pr); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// plan is what the first pass learned about a dataset.
type plan struct {
	meta  *Metadata
	files []string
	locs  map[string]*sqlstore.Location
	order []string // MonitoringLocationIDs in first-seen order
	v     *values.Schema
}

type progressCounter struct {
	done, total int64
	fn          func(done, total int64)
}

func (p *progressCounter) add(n int64) {
	p.done += n
	if p.fn != nil {
		p.fn(p.done, p.total)
	}
}

// countingReader reports bytes read to a progress counter every 256 KiB.
type countingReader struct {
	r       io.Reader
	p       *progressCounter
	pending int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.pending += int64(n)
	if c.pending >= 256<<10 || err != nil {
		c.p.add(c.pending)
		c.pending = 0
	}
	return n, err
}

// LineError is a bad value: the file, line and column it is in.
type LineError struct {
	File   string
	Line   int
	Column string
	Msg    string
}

func (e *LineError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d: column %s: %s", e.File, e.Line, e.Column, e.Msg)
}

// columns of a CSV file: the /Records fields, of which Id is ignored (the
// store numbers rows) and DOI and DatasetName, when present, must match the
// metadata.
var recordFields = func() map[string]query.Field {
	m := map[string]query.Field{}
	for _, f := range query.Records.Fields {
		m[f.Name] = f
	}
	return m
}()

var requiredColumns = []string{"MonitoringLocationID", "MonitoringLocationName", "MonitoringLocationLatitude",
	"MonitoringLocationLongitude", "MonitoringLocationHorizontalCoordinateReferenceSystem", "MonitoringLocationType",
	"ActivityType", "ActivityMediaName", "ActivityStartDate", "CharacteristicName"}

// vocabularyOf names the list a column's values must come from.
var vocabularyOf = map[string]string{
	"MonitoringLocationHorizontalCoordinateReferenceSystem": values.MonitoringLocationHorizontalCRS,
	"MonitoringLocationHorizontalAccuracyUnit":              values.MonitoringLocationHorizontalAccuracyUnit,
	"MonitoringLocationVerticalUnit":                        values.MonitoringLocationVerticalUnit,
	"MonitoringLocationType":                                values.MonitoringLocationType,
	"ActivityType":                                          values.ActivityType,
	"ActivityMediaName":                                     values.ActivityMediaName,
	"ActivityDepthHeightUnit":                               values.ActivityDepthHeightUnit,
	"SampleCollectionEquipmentName":                         values.SampleCollectionEquipmentName,
	"CharacteristicName":                                    values.CharacteristicName,
	"MethodSpeciation":                                      values.MethodSpeciation,
	"ResultSampleFraction":                                  values.ResultSampleFraction,
	"ResultUnit":                                            values.ResultUnit,
	"ResultValueType":                                       values.ResultValueType,
	"ResultDetectionCondition":                              values.ResultDetectionCondition,
	"ResultDetectionQuantitationLimitUnit":                  values.ResultDetectionQuantitationLimitUnit,
	"ResultDetectionQuantitationLimitType":                  values.ResultDetectionQuantitationLimitType,
	"ResultStatusID":                                        values.ResultStatusID,
	"ResultAnalyticalMethodContext":                         values.ResultAnalyticalMethodContext,
}

// reader reads one CSV file row by row into observations.
type reader struct {
	file  string
	csv   *csv.Reader
	close func() error
	cols  []string // header, by position
	line  int
	p     *plan
}

func (p *plan) open(path string, pr *progressCounter) (*reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	cr := csv.NewReader(&countingReader{r: f, p: pr})
	cr.ReuseRecord = true
	r := &reader{file: path, csv: cr, close: f.Close, p: p}
	header, err := cr.Read()
	if err != nil {
		f.Close()
		if errors.Is(err, io.EOF) {
			return nil, &LineError{File: path, Line: 1, Msg: "the file is empty; a header row is required"}
		}
		return nil, r.csvError(err)
	}
	seen := map[string]bool{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, ok := recordFields[h]; !ok {
			f.Close()
			return nil, &LineError{File: path, Line: 1, Column: h, Msg: fmt.Sprintf("unknown column (position %d); columns are the /Records fields", i+1)}
		}
		if seen[h] {
			f.Close()
			return nil, &LineError{File: path, Line: 1, Column: h, Msg: "the column appears twice"}
		}
		seen[h] = true
		r.cols = append(r.cols, h)
	}
	for _, c := range requiredColumns {
		if !seen[c] {
			f.Close()
			return nil, &LineError{File: path, Line: 1, Column: c, Msg: "required column is missing"}
		}
	}
	r.line = 1
	return r, nil
}

func (r *reader) csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &LineError{File: r.file, Line: pe.Line, Msg: pe.Err.Error()}
	}
	return fmt.Errorf("%s: %w", r.file, err)
}

// next reads one row into loc (location fields) and o (observation). It
// returns false at the end of the file.
func (r *reader) next(loc *sqlstore.Location, o *sqlstore.Observation) (bool, error) {
	rec, err := r.csv.Read()
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, r.csvError(err)
	}
	r.line, _ = r.csv.FieldPos(0)
	*loc = sqlstore.Location{DOI: r.p.meta.DOI}
	*o = sqlstore.Observation{DOI: r.p.meta.DOI}
	for i, name := range r.cols {
		raw := rec[i]
		if err := r.set(name, raw, loc, o); err != nil {
			return false, err
		}
	}
	return true, r.checkRow(o)
}

func (r *reader) bad(col, format string, args ...any) error {
	return &LineError{File: r.file, Line: r.line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

// set checks one cell and stores it: first as a value of its column's kind,
// then in the location or observation field the column names.
func (r *reader) set(name, raw string, loc *sqlstore.Location, o *sqlstore.Observation) error {
	if strings.IndexByte(raw, 0) >= 0 {
		return r.bad(name, "holds a NUL byte")
	}
	if raw == "" {
		return nil // null
	}
	if list, ok := vocabularyOf[name]; ok && !r.p.v.List(list).Contains(raw) {
		return r.bad(name, "%q is not an allowed value", raw)
	}
	cell, err := r.cell(name, raw)
	if err != nil {
		return err
	}
	return r.place(name, raw, cell, loc, o)
}

// cell parses raw as a value of the column's kind.
func (r *reader) cell(name, raw string) (sqlstore.Cell, error) {
	switch recordFields[name].Kind {
	case query.KindFloat:
		v, err := strconv.ParseFloat(strings.TrimSpace(raw), 64)
		if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
			return sqlstore.Cell{}, r.bad(name, "%q is not a number", raw)
		}
		return sqlstore.Num(v), nil
	case query.KindDate:
		if _, ok := query.ParseInstant(raw); !ok || len(raw) != 10 {
			return sqlstore.Cell{}, r.bad(name, "%q is not a date (YYYY-MM-DD)", raw)
		}
		return sqlstore.Text(raw), nil
	case query.KindTime:
		t, ok := normalTime(raw)
		if !ok {
			return sqlstore.Cell{}, r.bad(name, "%q is not a time (HH:MM:SS)", raw)
		}
		return sqlstore.Text(t), nil
	default:
		if csvsafe.Formula([]byte(raw)) {
			return sqlstore.Cell{}, r.bad(name, "%q would run as a formula in a spreadsheet (CWE-1236: it begins with %q); make it text by prefixing it with ' or remove that character", raw, raw[:1])
		}
		return sqlstore.Text(raw), nil
	}
}

// place stores a parsed cell where its column belongs: the location's own
// fields, a check against the metadata, or the observation's tail.
func (r *reader) place(name, raw string, cell sqlstore.Cell, loc *sqlstore.Location, o *sqlstore.Observation) error {
	switch name {
	case "Id":
	case "DOI":
		if raw != r.p.meta.DOI {
			return r.bad(name, "%q differs from the metadata's DOI %s", raw, r.p.meta.DOI)
		}
	case "DatasetName":
		if raw != r.p.meta.DatasetName {
			return r.bad(name, "%q differs from the metadata's DatasetName %q", raw, r.p.meta.DatasetName)
		}
	case "MonitoringLocationID":
		loc.MonitoringLocationID = raw
	case "MonitoringLocationName":
		loc.Name = raw
	case "MonitoringLocationLatitude":
		if cell.F < -90 || cell.F > 90 {
			return r.bad(name, "%q is not a latitude", raw)
		}
		loc.Latitude = cell.F
	case "MonitoringLocationLongitude":
		if cell.F < -180 || cell.F > 180 {
			return r.bad(name, "%q is not a longitude", raw)
		}
		loc.Longitude = cell.F
	case "MonitoringLocationHorizontalCoordinateReferenceSystem":
		loc.HorizontalCRS = raw
	case "MonitoringLocationHorizontalAccuracyMeasure":
		loc.HorizontalAccuracyMeasure = cell
	case "MonitoringLocationHorizontalAccuracyUnit":
		loc.HorizontalAccuracyUnit = cell
	case "MonitoringLocationVerticalMeasure":
		loc.VerticalMeasure = cell
	case "MonitoringLocationVerticalUnit":
		loc.VerticalUnit = cell
	case "MonitoringLocationType":
		loc.Type = raw
	default:
		i, ok := query.TailIndex(name)
		if !ok {
			return r.bad(name, "not an observation column")
		}
		o.Tail[i] = cell
	}
	return nil
}

// normalTime accepts HH:MM:SS or HH:MM.
func normalTime(s string) (string, bool) {
	if len(s) == 5 {
		s += ":00"
	}
	if len(s) != 8 || s[2] != ':' || s[5] != ':' {
		return "", false
	}
	h, err1 := strconv.Atoi(s[:2])
	m, err2 := strconv.Atoi(s[3:5])
	sec, err3 := strconv.Atoi(s[6:])
	if err1 != nil || err2 != nil || err3 != nil || h > 23 || m > 59 || sec > 59 || h < 0 || m < 0 || sec < 0 {
		return "", false
	}
	return s, true
}

// checkRow applies the rules that span columns.
func (r *reader) checkRow(o *sqlstore.Observation) error {
	for _, c := range []struct {
		i    int
		name string
	}{{query.ActivityType, "ActivityType"}, {query.ActivityMediaName, "ActivityMediaName"},
		{query.ActivityStartDate, "ActivityStartDate"}, {query.CharacteristicName, "CharacteristicName"}} {
		if !o.Tail[c.i].Valid {
			return r.bad(c.name, "a value is required")
		}
	}
	value, cond := o.Tail[query.ResultValue].Valid, o.Tail[query.ResultDetectionCondition].Valid
	switch {
	case value && cond:
		return r.bad("ResultDetectionCondition", "a row has a ResultValue or a ResultDetectionCondition, not both")
	case !value && !cond:
		return r.bad("ResultValue", "a row needs a ResultValue or a ResultDetectionCondition")
	case value && !o.Tail[query.ResultUnit].Valid:
		return r.bad("ResultUnit", "a ResultValue needs its unit")
	}
	return nil
}

// scan is the first pass over a file: every value is checked and the
// locations are collected; rows are not kept.
func (p *plan) scan(ctx context.Context, path string, pr *progressCounter) error {
	r, err := p.open(path, pr)
	if err != nil {
		return err
	}
	defer r.close()
	var loc sqlstore.Location
	var o sqlstore.Observation
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		ok, err := r.next(&loc, &o)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if err := p.addLocation(r, &loc); err != nil {
			return err
		}
	}
}

func (p *plan) addLocation(r *reader, loc *sqlstore.Location) error {
	prev := p.locs[loc.MonitoringLocationID]
	if prev == nil {
		l := *loc
		l.Regions = p.meta.Regions[l.MonitoringLocationID]
		p.locs[l.MonitoringLocationID] = &l
		p.order = append(p.order, l.MonitoringLocationID)
		return nil
	}
	for _, c := range []struct {
		col  string
		same bool
	}{
		{"MonitoringLocationName", prev.Name == loc.Name},
		{"MonitoringLocationLatitude", prev.Latitude == loc.Latitude},
		{"MonitoringLocationLongitude", prev.Longitude == loc.Longitude},
		{"MonitoringLocationHorizontalCoordinateReferenceSystem", prev.HorizontalCRS == loc.HorizontalCRS},
		{"MonitoringLocationHorizontalAccuracyMeasure", prev.HorizontalAccuracyMeasure == loc.HorizontalAccuracyMeasure},
		{"MonitoringLocationHorizontalAccuracyUnit", prev.HorizontalAccuracyUnit == loc.HorizontalAccuracyUnit},
		{"MonitoringLocationVerticalMeasure", prev.VerticalMeasure == loc.VerticalMeasure},
		{"MonitoringLocationVerticalUnit", prev.VerticalUnit == loc.VerticalUnit},
		{"MonitoringLocationType", prev.Type == loc.Type},
	} {
		if !c.same {
			return &LineError{File: r.file, Line: r.line, Column: c.col,
				Msg: fmt.Sprintf("location %q is described differently than on an earlier row", loc.MonitoringLocationID)}
		}
	}
	return nil
}

// load is the second pass: rows go to the loader.
func (p *plan) load(ctx context.Context, l *sqlstore.Loader, path string, pr *progressCounter) error {
	r, err := p.open(path, pr)
	if err != nil {
		return err
	}
	defer r.close()
	var loc sqlstore.Location
	n := 0
	_, err = l.AddObservations(func(o *sqlstore.Observation) (bool, error) {
		n++
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return false, err
			}
		}
		ok, err := r.next(&loc, o)
		if err != nil || !ok {
			return false, err
		}
		o.LocationID = p.locs[loc.MonitoringLocationID].ID
		return true, nil
	})
	return err
}
