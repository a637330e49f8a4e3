package sqlstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/odata/internal/jsonenc"
	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/values"
)

// Cell is one nullable value of a loaded row: S for text kinds (in stored
// form), F for numbers. The zero Cell is NULL.
type Cell struct {
	Valid bool
	S     string
	F     float64
}

// Text returns a non-null text cell.
func Text(s string) Cell { return Cell{Valid: true, S: s} }

// Num returns a non-null number cell.
func Num(f float64) Cell { return Cell{Valid: true, F: f} }

// Dataset is one /Metadata row. JSON names are the API's field names, so a
// metadata file is read straight into it.
type Dataset struct {
	ID                         string     `json:"Id"`
	DOI                        string     `json:"DOI"`
	Version                    string     `json:"Version"`
	DatasetName                string     `json:"DatasetName"`
	DataStewardEmail           string     `json:"DataStewardEmail"`
	DataCollectionOrganization string     `json:"DataCollectionOrganization"`
	DataUploadOrganization     string     `json:"DataUploadOrganization"`
	ProgressCode               string     `json:"ProgressCode"`
	MaintenanceFrequencyCode   string     `json:"MaintenanceFrequencyCode"`
	Abstract                   string     `json:"Abstract"`
	DataCollectionInformation  string     `json:"DataCollectionInformation"`
	DataProcessing             string     `json:"DataProcessing"`
	FundingSources             string     `json:"FundingSources"`
	DataSourceURL              *string    `json:"DataSourceURL"`
	OtherDataSources           string     `json:"OtherDataSources"`
	Citation                   string     `json:"Citation"`
	Licence                    string     `json:"Licence"`
	Disclaimer                 string     `json:"Disclaimer"`
	TopicCategoryCode          []string   `json:"TopicCategoryCode"`
	Keywords                   []string   `json:"Keywords"`
	CreateTimestamp            string     `json:"CreateTimestamp"`
	PublishedTimestamp         string     `json:"PublishedTimestamp"`
	TemporalExtent             *[2]string `json:"TemporalExtent"`
}

// Location is one monitoring location of a dataset.
type Location struct {
	// ID is assigned by Loader.AddLocation.
	ID                        int64
	DOI                       string
	MonitoringLocationID      string
	Name                      string
	Latitude, Longitude       float64
	HorizontalCRS             string
	HorizontalAccuracyMeasure Cell
	HorizontalAccuracyUnit    Cell
	VerticalMeasure           Cell
	VerticalUnit              Cell
	Type                      string
	// Regions are RegionId values: at most one of each kind (admin.2.*,
	// admin.4.*, hub.*).
	Regions []string
}

// Observation is one observation row; Tail is indexed by the tail
// constants (ActivityType ... LaboratorySampleID).
type Observation struct {
	DOI        string
	LocationID int64
	Tail       [query.TailLen]Cell
}

// Loader adds rows to a store inside one transaction (see DB.Load).
type Loader struct {
	db      *DB
	tx      loadTx
	ctx     context.Context
	schema  *values.Schema
	nextLoc int64
	nextObs int64
	locs    map[int64]*locInfo
	dois    map[string]bool
	widths  map[string]jsonenc.Width
	obsW    [query.TailLen]jsonenc.Width // observation columns, kept apart: they are hot
	obs     int64
	bulk    bool // observations were empty: indexes are rebuilt at the end
}

type locInfo struct {
	doi     string
	typ     string
	regions [3]Cell // country, province, hub, as regionKinds
}

// LoadResult reports what a load added.
type LoadResult struct {
	Datasets, Locations, Observations int64
}

// Load runs fn with a Loader in one transaction: when fn or the commit
// fails, the store is left as it was. Loading into an empty observations
// table drops its secondary indexes first and builds them once at the end,
// which is much faster than maintaining them row by row. Statistics are
// refreshed after a successful commit.
func (db *DB) Load(ctx context.Context, fn func(*Loader) error) (LoadResult, error) {
	schema, err := values.Load()
	if err != nil {
		return LoadResult{}, err
	}
	tx, err := db.be.begin(ctx)
	if err != nil {
		return LoadResult{}, fmt.Errorf("sqlstore: load: %w", err)
	}
	defer tx.rollback()
	if err := tx.prepareLoad(ctx); err != nil {
		return LoadResult{}, fmt.Errorf("sqlstore: load: %w", err)
	}
	l := &Loader{db: db, tx: tx, ctx: ctx, schema: schema, locs: map[int64]*locInfo{},
		dois: map[string]bool{}, widths: map[string]jsonenc.Width{}}
	if l.nextLoc, err = tx.queryInt(ctx, "SELECT COALESCE(MAX(id), 0) + 1 FROM locations"); err != nil {
		return LoadResult{}, fmt.Errorf("sqlstore: load: %w", err)
	}
	if l.nextObs, err = tx.queryInt(ctx, "SELECT COALESCE(MAX(id), 0) + 1 FROM observations"); err != nil {
		return LoadResult{}, fmt.Errorf("sqlstore: load: %w", err)
	}
	if l.nextObs == 1 {
		l.bulk = true
		if err := tx.startBulk(ctx); err != nil {
			return LoadResult{}, fmt.Errorf("sqlstore: load: %w", err)
		}
		for _, ix := range observationsTable.indexes {
			if err := tx.exec(ctx, "DROP INDEX IF EXISTS "+ix.name); err != nil {
				return LoadResult{}, fmt.Errorf("sqlstore: load: %w", err)
			}
		}
	}
	startLoc, startObs := l.nextLoc, l.nextObs
	if err := fn(l); err != nil {
		return LoadResult{}, err
	}
	if l.bulk {
		for _, ix := range observationsTable.indexes {
			if err := tx.exec(ctx, db.d.createIndex(observationsTable, ix)); err != nil {
				return LoadResult{}, fmt.Errorf("sqlstore: load: build index %s: %w", ix.name, err)
			}
		}
	}
	if err := l.saveWidths(); err != nil {
		return LoadResult{}, err
	}
	if err := tx.commit(ctx); err != nil {
		return LoadResult{}, fmt.Errorf("sqlstore: load: commit: %w", err)
	}
	db.statsMu.Lock()
	db.stats = nil
	db.statsMu.Unlock()
	res := LoadResult{Datasets: int64(len(l.dois)), Locations: l.nextLoc - startLoc, Observations: l.nextObs - startObs}
	if err := db.analyze(ctx); err != nil {
		return res, fmt.Errorf("sqlstore: load committed, but refreshing planner statistics failed: %w", err)
	}
	return res, nil
}

func (db *DB) analyze(ctx context.Context) error {
	if db.d.pg {
		// VACUUM also sets the visibility map, which index-only probes need.
		return db.be.exec(ctx, "VACUUM (ANALYZE) datasets, locations, location_regions, observations")
	}
	// A bounded sample per index keeps ANALYZE quick on big files.
	return db.be.exec(ctx, "PRAGMA analysis_limit = 2000; ANALYZE")
}

func (l *Loader) track(tbl, col string, s string) {
	key := tbl + "." + col
	w := l.widths[key]
	w.Observe(s)
	l.widths[key] = w
}

func (l *Loader) saveWidths() error {
	upsert := "INSERT INTO column_stats (tbl, col, max_json, max_escape) VALUES (%s) ON CONFLICT (tbl, col) DO UPDATE SET " +
		"max_json = %s(column_stats.max_json, excluded.max_json), max_escape = %s(column_stats.max_escape, excluded.max_escape)"
	greatest := "max"
	if l.db.d.pg {
		greatest = "GREATEST"
	}
	for i, w := range l.obsW {
		if w != (jsonenc.Width{}) {
			l.widths["observations."+query.Tail[i].Column] = w
		}
	}
	for key, w := range l.widths {
		tbl, col, _ := strings.Cut(key, ".")
		b := &builder{d: l.db.d}
		b.arg(tbl).s(", ").arg(col).s(", ").arg(w.JSON).s(", ").arg(w.Escape)
		if err := l.tx.exec(l.ctx, fmt.Sprintf(upsert, b.String(), greatest, greatest), b.args...); err != nil {
			return fmt.Errorf("sqlstore: load: column stats: %w", err)
		}
	}
	return nil
}

// NewUUID returns a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return query.FormatUUID(b)
}

func jsonArray(a []string) string {
	if a == nil {
		a = []string{}
	}
	b, _ := json.Marshal(a) // a []string always marshals
	return string(b)
}

// AddDataset inserts a dataset. Its DOI must be new to the store; an empty
// ID gets a random UUID. Timestamps may be any form query.ParseInstant
// accepts and are stored normalised.
func (l *Loader) AddDataset(d *Dataset) error {
	if d.DOI == "" {
		return errors.New("dataset: DOI is required")
	}
	if l.dois[d.DOI] {
		return fmt.Errorf("dataset %s: added twice", d.DOI)
	}
	if d.ID == "" {
		d.ID = NewUUID()
	} else if u, ok := query.ParseUUID(d.ID); ok {
		d.ID = u
	} else {
		return fmt.Errorf("dataset %s: Id %q is not a UUID", d.DOI, d.ID)
	}
	n, err := l.tx.queryInt(l.ctx, "SELECT count(*) FROM datasets WHERE doi = "+string(l.db.d.appendPlaceholder(nil, 1)), d.DOI)
	if err != nil {
		return fmt.Errorf("dataset %s: %w", d.DOI, err)
	}
	if n > 0 {
		return fmt.Errorf("dataset %s is already in the store", d.DOI)
	}
	for _, ts := range []*string{&d.CreateTimestamp, &d.PublishedTimestamp} {
		v, ok := query.ParseInstant(*ts)
		if !ok {
			return fmt.Errorf("dataset %s: timestamp %q is not a date or date-time", d.DOI, *ts)
		}
		*ts = v
	}
	var extent any
	if d.TemporalExtent != nil {
		for _, s := range d.TemporalExtent {
			if !validDate(s) {
				return fmt.Errorf("dataset %s: TemporalExtent %q is not a date", d.DOI, s)
			}
		}
		extent = jsonArray(d.TemporalExtent[:])
	}
	var url any
	if d.DataSourceURL != nil {
		url = *d.DataSourceURL
	}
	row := []any{d.ID, d.DOI, d.Version, d.DatasetName, d.DataStewardEmail, d.DataCollectionOrganization,
		d.DataUploadOrganization, d.ProgressCode, d.MaintenanceFrequencyCode, d.Abstract,
		d.DataCollectionInformation, d.DataProcessing, d.FundingSources, url, d.OtherDataSources,
		d.Citation, d.Licence, d.Disclaimer, jsonArray(d.TopicCategoryCode), jsonArray(d.Keywords),
		d.CreateTimestamp, d.PublishedTimestamp, extent}
	if err := l.insert(datasetsTable, row); err != nil {
		return fmt.Errorf("dataset %s: %w", d.DOI, err)
	}
	l.dois[d.DOI] = true
	return nil
}

func (l *Loader) insert(t *table, row []any) error {
	if len(row) != len(t.cols) {
		return fmt.Errorf("sqlstore: %d values for %d columns of %s", len(row), len(t.cols), t.name)
	}
	b := &builder{d: l.db.d}
	b.s("INSERT INTO ", t.name, " (")
	for i, c := range t.cols {
		if i > 0 {
			b.s(", ")
		}
		b.s(c.name)
	}
	b.s(") VALUES (")
	for i, v := range row {
		if i > 0 {
			b.s(", ")
		}
		b.arg(v)
		if s, ok := v.(string); ok && t.cols[i].typ == tText {
			l.track(t.name, t.cols[i].name, s)
		}
	}
	b.s(")")
	return l.tx.exec(l.ctx, b.String(), b.args...)
}

func cellArg(c Cell, t colType) any {
	if !c.Valid {
		return nil
	}
	if t == tFloat {
		return c.F
	}
	return c.S
}

// AddLocation inserts a location of a dataset added in this load and sets
// its ID.
func (l *Loader) AddLocation(loc *Location) error {
	if !l.dois[loc.DOI] {
		return fmt.Errorf("location %q: dataset %s is not part of this load", loc.MonitoringLocationID, loc.DOI)
	}
	info := &locInfo{doi: loc.DOI, typ: loc.Type}
	for _, r := range loc.Regions {
		col := regionColumn(r)
		k := -1
		for i, rk := range regionKinds {
			if rk.col == col {
				k = i
			}
		}
		if k < 0 {
			return fmt.Errorf("location %q: RegionId %q is not of a known form (hub.*, admin.2.*, admin.4.*)", loc.MonitoringLocationID, r)
		}
		if info.regions[k].Valid && info.regions[k].S != r {
			return fmt.Errorf("location %q: two regions of the same kind: %q and %q", loc.MonitoringLocationID, info.regions[k].S, r)
		}
		info.regions[k] = Text(r)
	}
	loc.ID = l.nextLoc
	row := []any{loc.ID, loc.DOI, loc.MonitoringLocationID, loc.Name, loc.Latitude, loc.Longitude, loc.HorizontalCRS,
		cellArg(loc.HorizontalAccuracyMeasure, tFloat), cellArg(loc.HorizontalAccuracyUnit, tText),
		cellArg(loc.VerticalMeasure, tFloat), cellArg(loc.VerticalUnit, tText), loc.Type,
		cellArg(info.regions[0], tText), cellArg(info.regions[1], tText), cellArg(info.regions[2], tText)}
	if err := l.insert(locationsTable, row); err != nil {
		return fmt.Errorf("location %q: %w", loc.MonitoringLocationID, err)
	}
	for _, r := range info.regions {
		if r.Valid {
			if err := l.insert(regionsTable, []any{loc.ID, r.S}); err != nil {
				return fmt.Errorf("location %q: %w", loc.MonitoringLocationID, err)
			}
		}
	}
	l.nextLoc++
	l.locs[loc.ID] = info
	return nil
}

// AddObservations streams observations into the store until next reports
// false or fails. next fills the given Observation (reused between calls).
// Ids are assigned in order. It returns how many rows were added.
func (l *Loader) AddObservations(next func(*Observation) (bool, error)) (int64, error) {
	src := &obsSource{l: l, next: next}
	n, err := l.tx.copyObservations(l.ctx, src)
	if src.err != nil {
		return n, src.err // the row source's own error, not the driver's wrapping
	}
	if err != nil {
		return n, fmt.Errorf("sqlstore: load observations: %w", err)
	}
	return n, nil
}

// obsSource turns the caller's rows into complete observation rows: id,
// copies of the location's attributes, the derived year and group.
type obsSource struct {
	l    *Loader
	next func(*Observation) (bool, error)
	o    Observation
	row  obsRow
	err  error
}

// obsRow is a complete observations row, in table column order.
type obsRow struct {
	id, locationID, year int64
	doi, group           string
	loc                  *locInfo
	tail                 *[query.TailLen]Cell
}

// advance reads the next row into s.row. It returns false at the end or on
// error (kept in s.err).
func (s *obsSource) advance() bool {
	s.o = Observation{}
	ok, err := s.next(&s.o)
	if err != nil {
		s.err = err
		return false
	}
	if !ok {
		return false
	}
	o := &s.o
	loc := s.l.locs[o.LocationID]
	if loc == nil {
		s.err = fmt.Errorf("observation: location %d is not part of this load", o.LocationID)
		return false
	}
	if o.DOI == "" {
		o.DOI = loc.doi
	} else if o.DOI != loc.doi {
		s.err = fmt.Errorf("observation: DOI %s differs from its location's %s", o.DOI, loc.doi)
		return false
	}
	for i := range o.Tail {
		if !o.Tail[i].Valid && !query.Tail[i].Nullable {
			s.err = fmt.Errorf("observation: %s is required", query.Tail[i].Name)
			return false
		}
	}
	date := o.Tail[query.ActivityStartDate].S
	if !validDate(date) {
		s.err = fmt.Errorf("observation: ActivityStartDate %q is not YYYY-MM-DD", date)
		return false
	}
	year, _ := strconv.ParseInt(date[:4], 10, 64)
	group, ok := s.l.schema.GroupType(o.Tail[query.ActivityType].S)
	if !ok {
		s.err = fmt.Errorf("observation: ActivityType %q is not a known value", o.Tail[query.ActivityType].S)
		return false
	}
	for i := range o.Tail {
		if c := &o.Tail[i]; c.Valid && tailTypes[i] == tText {
			if strings.IndexByte(c.S, 0) >= 0 {
				s.err = fmt.Errorf("observation: %s holds a NUL byte", query.Tail[i].Name)
				return false
			}
			s.l.obsW[i].Observe(c.S)
		}
	}
	s.row = obsRow{id: s.l.nextObs, locationID: o.LocationID, year: year, doi: o.DOI, group: group, loc: loc, tail: &o.Tail}
	s.l.nextObs++
	s.l.obs++
	return true
}

// tailTypes are the storage types of the tail, looked up per loaded value.
var tailTypes = func() (out [query.TailLen]colType) {
	for i := range query.Tail {
		out[i] = kindType(query.Tail[i].Kind)
	}
	return out
}()

// validDate checks the YYYY-MM-DD form and that the day exists.
func validDate(s string) bool {
	_, ok := query.ParseInstant(s)
	return ok && len(s) == 10
}
