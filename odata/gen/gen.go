package gen

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
	"github.com/sluicehq/sluice/odata/values"
)

// Config sizes a generated data set.
type Config struct {
	// Rows is the number of observations.
	Rows int64
	// Datasets and Locations default (when zero) to sizes that grow with
	// Rows: dozens of datasets and up to thousands of locations.
	Datasets  int
	Locations int
	// Seed makes the data reproducible.
	Seed uint64
}

// DefaultConfig returns the configuration for n observations.
func DefaultConfig(n int64) Config {
	c := Config{Rows: n, Seed: 1}
	return c.withDefaults()
}

func (c Config) withDefaults() Config {
	if c.Datasets == 0 {
		c.Datasets = int(min(max(c.Rows/50_000, 24), 72))
	}
	if c.Locations == 0 {
		c.Locations = int(min(max(c.Rows/200, 50), 6000))
	}
	return c
}

// Validate reports a configuration that cannot be generated.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Rows < 0:
		return errors.New("gen: Rows must not be negative")
	case c.Datasets < 1:
		return errors.New("gen: Datasets must be at least 1")
	case c.Locations < c.Datasets:
		return fmt.Errorf("gen: %d locations cannot cover %d datasets (each needs one)", c.Locations, c.Datasets)
	}
	return nil
}

// Generator produces one data set. Datasets and Locations are built by New;
// observations come one at a time from Next.
type Generator struct {
	cfg       Config
	rng       *rand.Rand
	voc       *vocab
	labIDs    []string
	datasets  []*sqlstore.Dataset
	locations []*sqlstore.Location
	plans     []*datasetPlan
	// observation cursor
	planIdx int
	left    int64
	emitted int64
}

// datasetPlan is what shapes a dataset's observations.
type datasetPlan struct {
	kind      kind
	locs      []*sqlstore.Location
	rows      int64
	firstDay  int // index into days
	spanDays  int
	lab       string
	chars     []*profile
	charCum   []float64
	equipment string
	method    [3]string // ID, context, name for field meters
	province  int       // where most of its locations are
}

type kind uint8

const (
	kindField      kind = iota // community field measurements
	kindLab                    // lab samples: nutrients, metals, long tail
	kindContinuous             // sensors: a few parameters, many rows
)

// New validates cfg and builds the datasets and locations.
func New(cfg Config) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	v, err := values.Load()
	if err != nil {
		return nil, err
	}
	voc, err := newVocab(v)
	if err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), voc: voc}
	g.build(voc)
	for i := 0; i < 4096; i++ {
		g.labIDs = append(g.labIDs, fmt.Sprintf("L%07d-%d", g.rng.IntN(10_000_000), 1+g.rng.IntN(9)))
	}
	return g, nil
}

// Datasets returns the generated datasets.
func (g *Generator) Datasets() []*sqlstore.Dataset { return g.datasets }

// Locations returns the generated locations. Their ID is zero until a
// loader assigns it; observations refer to locations through it, so
// either load them or number them (1, 2, ...) before calling Next.
func (g *Generator) Locations() []*sqlstore.Location { return g.locations }

// --- datasets and locations ----------------------------------------------

type province struct {
	code           string
	name           string
	w              float64
	latMin, latMax float64
	lonMin, lonMax float64
	hubs           []string // chosen at random, "" means none
}

var provinces = []province{
	{"on", "Ontario", 24, 42.5, 50, -92, -75, []string{"hub.greatlakes", "hub.greatlakes", "hub.greatlakes", ""}},
	{"bc", "British Columbia", 15, 48.5, 58, -132, -115, []string{"hub.pacific"}},
	{"ab", "Alberta", 12, 49.2, 59.5, -119.5, -110.2, []string{"hub.mackenzie", "hub.lakewinnipeg"}},
	{"qc", "Quebec", 10, 45.1, 55, -79, -60, []string{"hub.greatlakes", ""}},
	{"mb", "Manitoba", 8, 49.1, 58, -101.3, -90, []string{"hub.lakewinnipeg"}},
	{"sk", "Saskatchewan", 6, 49.1, 59.5, -109.8, -101.5, []string{"hub.lakewinnipeg", "hub.mackenzie"}},
	{"ns", "Nova Scotia", 6, 43.6, 46.9, -66, -60, []string{"hub.atlantic"}},
	{"nb", "New Brunswick", 5, 45.1, 47.9, -68.8, -64.2, []string{"hub.atlantic"}},
	{"nl", "Newfoundland and Labrador", 3, 46.8, 53, -59.3, -52.8, []string{"hub.atlantic"}},
	{"pe", "Prince Edward Island", 2, 46, 47, -64.3, -62.1, []string{"hub.atlantic"}},
	{"nt", "Northwest Territories", 4, 60.1, 68, -133, -103, []string{"hub.mackenzie"}},
	{"yt", "Yukon", 2, 60.1, 68, -140, -125, []string{"hub.mackenzie", "hub.pacific"}},
	{"nu", "Nunavut", 2, 60.5, 70, -110, -70, []string{""}},
}

var (
	orgs = []string{"Atlantic Water Network", "Lake Winnipeg Foundation", "Swim Drink Fish", "Mackenzie DataStream",
		"Great Lakes Watershed Alliance", "Living Lakes Canada", "Saint John River Keepers", "Bow River Basin Council",
		"Fraser Basin Stewards", "Ottawa Riverkeeper", "Petitcodiac Watershed Alliance", "Clean Annapolis River Project",
		"Credit Valley Conservation", "Red River Basin Commission", "North Saskatchewan Watershed Alliance", "Coastal Action"}
	waters = []string{"Bow", "Red", "Assiniboine", "Petitcodiac", "Annapolis", "Saint John", "Ottawa", "Credit", "Fraser",
		"Elbow", "Souris", "Qu'Appelle", "Miramichi", "LaHave", "Humber", "Mackenzie", "Hay", "Slave", "Peace", "Athabasca",
		"Thames", "Grand", "Humber", "Don", "Rouge", "Nicola", "Thompson", "Kootenay", "Columbia", "Yukon", "Liard"}
	features = []string{"River", "Creek", "Brook", "Lake", "Stream", "Bay"}
	places   = []string{"upstream of bridge", "at highway crossing", "near mouth", "below dam", "at park", "at boat launch",
		"above confluence", "at outlet", "north shore", "south basin", "at gauge station", "downstream of town"}
	labs     = []string{"ALS Environmental", "Bureau Veritas", "SGS AXYS", "Saskatchewan Research Council", "Caduceon Environmental Laboratories", "RPC Science & Engineering"}
	comments = []string{"Sample collected after heavy rain", "Ice cover present", `Field note: "very turbid", high flow`,
		"Duplicate analysis", "Meter recalibrated before reading", "Sample received warm", "Low water level; sample taken from bank",
		"Value verified by lab, see report L-22/118", "Tab\tseparated note from a spreadsheet"}
	// detection conditions that imply no ResultValue
	detections = []string{"Not Detected", "Below Detection/Quantification Limit", "Below Detection/Quantification Limit", "Detected Not Quantified"}
)

// build makes the datasets, then the locations, drawing from g.rng in a
// fixed order so that a seed always gives the same data.
func (g *Generator) build(voc *vocab) {
	r := g.rng
	provCum := make([]float64, len(provinces))
	s := 0.0
	for i, p := range provinces {
		s += p.w
		provCum[i] = s
	}
	// Dataset sizes fall off like real portals: a few large programs and
	// many small ones.
	weights := make([]float64, g.cfg.Datasets)
	wsum := 0.0
	for i := range weights {
		weights[i] = 1 / math.Pow(float64(i+1), 0.8)
		wsum += weights[i]
	}
	var assigned int64
	for i := 0; i < g.cfg.Datasets; i++ {
		rows := int64(float64(g.cfg.Rows) * weights[i] / wsum)
		if i == g.cfg.Datasets-1 {
			rows = g.cfg.Rows - assigned
		}
		assigned += rows
		g.addDataset(voc, rows, provCum)
	}
	// Every dataset gets at least one location; the rest go to datasets in
	// proportion to their size.
	for i := 0; i < g.cfg.Locations; i++ {
		di := i
		if i >= g.cfg.Datasets {
			di = pickWeighted(r, weights, wsum)
		}
		g.addLocation(voc, di, provCum)
	}
}

// origin is who runs a dataset, where and when: what its metadata is
// written from.
type origin struct {
	org, water         string
	prov               province
	kind               kind
	startYear, endYear int
	firstDay           int
}

// addDataset draws one dataset of rows observations: its plan, then its
// metadata.
func (g *Generator) addDataset(voc *vocab, rows int64, provCum []float64) {
	r := g.rng
	provIdx := pickCum(r, provCum)
	o := origin{prov: provinces[provIdx], org: orgs[r.IntN(len(orgs))], water: waters[r.IntN(len(waters))], kind: kindField}
	switch x := r.Float64(); {
	case x < 0.35:
		o.kind = kindLab
	case x < 0.5:
		o.kind = kindContinuous
	}
	o.startYear = voc.firstYear + r.IntN(22)
	o.endYear = min(2024, o.startYear+2+r.IntN(12))
	o.firstDay = dayIndex(voc, o.startYear)
	plan := &datasetPlan{kind: o.kind, rows: rows, firstDay: o.firstDay, spanDays: dayIndex(voc, o.endYear+1) - o.firstDay,
		lab: labs[r.IntN(len(labs))], equipment: []string{"Probe/Sensor", "Water Bottle", "Bucket", "Van Dorn Bottle"}[r.IntN(4)],
		method:   [3]string{"", []string{"YSI", "HACH", "HANNA", "Oakton"}[r.IntN(4)], "Multiparameter meter"},
		province: provIdx}
	g.chooseCharacteristics(voc, plan)
	g.datasets = append(g.datasets, g.describe(voc, o))
	g.plans = append(g.plans, plan)
}

// describe writes the metadata of a dataset from its origin.
func (g *Generator) describe(voc *vocab, o origin) *sqlstore.Dataset {
	r := g.rng
	org, water := o.org, o.water
	doi := fmt.Sprintf("10.25976/%s-%s", g.token(4), g.token(4))
	name := fmt.Sprintf("%s %s %s Water Quality Monitoring", org, water, features[r.IntN(len(features))])
	if o.kind == kindContinuous {
		name = fmt.Sprintf("%s Continuous %s Sensor Network", org, water)
	}
	created := time.Date(2018+r.IntN(6), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1000)*1e6, time.UTC)
	published := created.Add(time.Duration(1+r.IntN(30*24)) * time.Hour)
	version := fmt.Sprintf("%d.%d.%d", 1+r.IntN(3), r.IntN(5), r.IntN(3))
	var source *string
	if r.IntN(2) == 0 {
		u := "https://" + strings.ToLower(strings.ReplaceAll(org, " ", "")) + ".ca/data"
		source = &u
	}
	licence := "https://opendatacommons.org/licenses/by/1-0/"
	if r.IntN(3) == 0 {
		licence = "https://creativecommons.org/licenses/by/4.0/"
	}
	extent := [2]string{voc.days[o.firstDay], voc.days[dayIndex(voc, o.endYear+1)-1]}
	return &sqlstore.Dataset{
		ID:                         g.uuid(),
		DOI:                        doi,
		Version:                    version,
		DatasetName:                name,
		DataStewardEmail:           "data@" + strings.ToLower(strings.ReplaceAll(org, " ", "")) + ".ca",
		DataCollectionOrganization: org,
		DataUploadOrganization:     org,
		ProgressCode:               []string{"onGoing", "completed", "onGoing"}[r.IntN(3)],
		MaintenanceFrequencyCode:   []string{"annually", "asNeeded", "irregular", "monthly"}[r.IntN(4)],
		Abstract: fmt.Sprintf("Water quality data collected by %s in the %s watershed, %s, from %d to %d. "+
			"Volunteers and staff sampled %s sites following a documented protocol.", org, water, o.prov.name, o.startYear, o.endYear,
			[]string{"river", "lake", "stream and lake"}[r.IntN(3)]),
		DataCollectionInformation: "Samples were collected by trained monitors; field parameters were measured with calibrated meters.",
		DataProcessing:            "Data were reviewed for outliers and transcription errors before upload.",
		FundingSources:            []string{"Environment and Climate Change Canada", "The Gordon Foundation", "Provincial government", "RBC Foundation"}[r.IntN(4)],
		DataSourceURL:             source,
		OtherDataSources:          "",
		Citation:                  fmt.Sprintf("%s. %d. %s (Version %s) [Data set]. DataStream. https://doi.org/%s", org, published.Year(), name, version, doi),
		Licence:                   licence,
		Disclaimer:                "",
		TopicCategoryCode:         []string{"inlandWaters"},
		Keywords:                  []string{"water quality", strings.ToLower(o.prov.name), strings.ToLower(water)},
		CreateTimestamp:           created.Format(query.TimestampLayout),
		PublishedTimestamp:        published.Format(query.TimestampLayout),
		TemporalExtent:            &extent,
	}
}

func pickWeighted(r *rand.Rand, w []float64, sum float64) int {
	x := r.Float64() * sum
	for i, v := range w {
		x -= v
		if x < 0 {
			return i
		}
	}
	return len(w) - 1
}

func dayIndex(voc *vocab, year int) int {
	d := time.Date(year, 1, 1, 0, 0, 0, 0, time.UTC).Sub(time.Date(voc.firstYear, 1, 1, 0, 0, 0, 0, time.UTC))
	return min(int(d.Hours()/24), len(voc.days))
}

func (g *Generator) addLocation(voc *vocab, di int, provCum []float64) {
	r := g.rng
	ds, plan := g.datasets[di], g.plans[di]
	// Most programmes stay in their province; some span a border.
	prov := provinces[plan.province]
	if r.IntN(8) == 0 {
		prov = provinces[pickCum(r, provCum)]
	}
	typ := voc.locTypes[pickCum(r, voc.locTypeCum)]
	n := len(plan.locs) + 1
	loc := &sqlstore.Location{
		DOI:                  ds.DOI,
		MonitoringLocationID: fmt.Sprintf("%s-%03d", strings.ToUpper(ds.DOI[9:13]), n),
		Name:                 fmt.Sprintf("%s %s %s", waters[r.IntN(len(waters))], features[r.IntN(len(features))], places[r.IntN(len(places))]),
		Latitude:             round(prov.latMin+r.Float64()*(prov.latMax-prov.latMin), 5),
		Longitude:            round(prov.lonMin+r.Float64()*(prov.lonMax-prov.lonMin), 5),
		HorizontalCRS:        []string{"WGS84", "WGS84", "NAD83", "UNKWN"}[r.IntN(4)],
		Type:                 typ,
		Regions:              []string{"admin.2.ca", "admin.4.ca." + prov.code},
	}
	if hub := prov.hubs[r.IntN(len(prov.hubs))]; hub != "" {
		loc.Regions = append(loc.Regions, hub)
	}
	if r.IntN(10) == 0 {
		loc.VerticalMeasure = sqlstore.Num(round(50+r.Float64()*800, 1))
		loc.VerticalUnit = sqlstore.Text("m")
	}
	if r.IntN(12) == 0 {
		loc.HorizontalAccuracyMeasure = sqlstore.Num(float64(1 + r.IntN(30)))
		loc.HorizontalAccuracyUnit = sqlstore.Text("m")
	}
	plan.locs = append(plan.locs, loc)
	g.locations = append(g.locations, loc)
}

func (g *Generator) chooseCharacteristics(voc *vocab, plan *datasetPlan) {
	r := g.rng
	add := func(p *profile, w float64) {
		plan.chars = append(plan.chars, p)
		prev := 0.0
		if n := len(plan.charCum); n > 0 {
			prev = plan.charCum[n-1]
		}
		plan.charCum = append(plan.charCum, prev+w)
	}
	switch plan.kind {
	case kindContinuous:
		for _, p := range voc.core[:3+r.IntN(3)] {
			add(p, 1)
		}
	case kindField:
		for _, p := range voc.core {
			add(p, 1)
		}
		for _, p := range voc.lab[:2+r.IntN(4)] {
			add(p, 0.08)
		}
	case kindLab:
		for _, p := range voc.core[:2] {
			add(p, 0.6)
		}
		for _, p := range voc.lab {
			add(p, 0.5)
		}
		// A Zipf-like share of the long tail: most lab programmes measure
		// the head of it, few reach far down.
		n := 20 + r.IntN(len(voc.tail)-20)
		for i, p := range voc.tail[:n] {
			add(p, 0.4/math.Pow(float64(i+1), 1.2))
		}
		// Titanium: rare, but present in every lab dataset, so a filter on
		// it is sparse over the whole id range.
		add(voc.titanium, 0.03)
	}
}

const tokenChars = "abcdefghijklmnopqrstuvwxyz0123456789"

func (g *Generator) token(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = tokenChars[g.rng.IntN(len(tokenChars))]
	}
	return string(b)
}

func (g *Generator) uuid() string {
	var b [16]byte
	for i := range b {
		b[i] = byte(g.rng.Uint32())
	}
	return query.FormatUUID(b)
}

func round(f float64, dec int) float64 {
	p := math.Pow10(dec)
	return math.Round(f*p) / p
}
