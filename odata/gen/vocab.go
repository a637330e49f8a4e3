package gen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/odata/values"
)

// profile describes how one characteristic's results look.
type profile struct {
	name       string
	unit       string
	median     float64 // of a log-normal
	sigma      float64
	decimals   int
	speciation string
	fractions  []string
	lab        bool
	method     [3]string
}

type vocab struct {
	v          *values.Schema
	core       []*profile // field parameters, measured everywhere
	lab        []*profile // common lab parameters
	tail       []*profile // everything else with a known unit, Zipf-weighted
	titanium   *profile
	locTypes   []string
	locTypeCum []float64
	days       []string // YYYY-MM-DD from 1995-01-01
	times      []string // HH:MM:00
	firstYear  int
}

// fieldParam is a characteristic measured in the field, with the shape of
// its results.
type fieldParam struct {
	name, unit    string
	median, sigma float64
	dec           int
}

// labParam is a characteristic a laboratory reports, with its speciation,
// fractions and method (ID, context, name).
type labParam struct {
	name, unit    string
	median, sigma float64
	dec           int
	spec          string
	fractions     []string
	method        [3]string
}

var fieldParams = []fieldParam{
	{"Temperature, water", "deg C", 12, 0.5, 1},
	{"pH", "None", 7.6, 0.06, 2},
	{"Dissolved oxygen (DO)", "mg/L", 9.5, 0.25, 2},
	{"Specific conductance", "uS/cm", 250, 0.9, 0},
	{"Turbidity", "NTU", 4, 1.1, 1},
}

var labParams = []labParam{
	{"Total Phosphorus, mixed forms", "mg/L", 0.03, 0.9, 4, "as P", []string{"Total", "Dissolved"}, [3]string{"4500-P E", "APHA", "Phosphorus, ascorbic acid method"}},
	{"Total Nitrogen, mixed forms", "mg/L", 0.6, 0.7, 3, "as N", []string{"Total"}, [3]string{"4500-N C", "APHA", "Nitrogen (total), persulfate method"}},
	{"Nitrate", "mg/L", 0.3, 1.0, 3, "as N", []string{"Dissolved"}, [3]string{"4110 B", "APHA", "Ion chromatography"}},
	{"Ammonia", "mg/L", 0.05, 1.0, 3, "as N", []string{"Total"}, [3]string{"4500-NH3 G", "APHA", "Automated phenate method"}},
	{"Chloride", "mg/L", 15, 1.0, 1, "", []string{"Dissolved"}, [3]string{"4110 B", "APHA", "Ion chromatography"}},
	{"Escherichia coli", "MPN/100mL", 20, 1.4, 0, "", nil, [3]string{"9223 B", "APHA", "Enzyme substrate test"}},
	{"Total suspended solids", "mg/L", 6, 1.0, 1, "", []string{"Non-Filterable (Particle)"}, [3]string{"2540 D", "APHA", "Total suspended solids dried at 103-105 C"}},
	{"Aluminum", "ug/L", 40, 1.2, 1, "", []string{"Total", "Dissolved"}, [3]string{"200.8", "USEPA", "ICP-MS"}},
	{"Iron", "ug/L", 150, 1.1, 1, "", []string{"Total", "Dissolved"}, [3]string{"200.8", "USEPA", "ICP-MS"}},
	{"Copper", "ug/L", 1.2, 0.8, 2, "", []string{"Total", "Dissolved"}, [3]string{"200.8", "USEPA", "ICP-MS"}},
	{"Zinc", "ug/L", 3, 1.0, 2, "", []string{"Total", "Dissolved"}, [3]string{"200.8", "USEPA", "ICP-MS"}},
	{"Calcium", "mg/L", 25, 0.7, 2, "", []string{"Dissolved"}, [3]string{"200.7", "USEPA", "ICP-OES"}},
	{"Sulfate", "mg/L", 12, 1.0, 2, "as SO4", []string{"Dissolved"}, [3]string{"4110 B", "APHA", "Ion chromatography"}},
}

// locationTypeWeights is how often each kind of water is monitored.
var locationTypeWeights = []struct {
	t string
	w float64
}{
	{"River/Stream", 60}, {"Lake/Pond", 22}, {"Well", 4}, {"Wetland", 3}, {"Reservoir", 3},
	{"Estuary", 2}, {"Great Lake", 2}, {"Spring", 1}, {"Ocean", 1}, {"Pond-Stormwater", 1}, {"Canal Drainage", 1},
}

// newVocab builds what the generator draws from. Every name and unit is
// checked against the vocabularies, so generated rows would pass an import.
func newVocab(v *values.Schema) (*vocab, error) {
	voc := &vocab{v: v, firstYear: 1995}
	if err := voc.addKnown(); err != nil {
		return nil, err
	}
	voc.addTail()
	if voc.titanium == nil {
		return nil, errors.New("gen: Titanium is missing from the vocabularies")
	}
	if err := voc.addLocationTypes(); err != nil {
		return nil, err
	}
	voc.addCalendar()
	return voc, nil
}

// newProfile checks that name is a characteristic and describes its results.
func (voc *vocab) newProfile(name, unit string, median, sigma float64, dec int) (*profile, error) {
	if !voc.v.List(values.CharacteristicName).Contains(name) {
		return nil, fmt.Errorf("gen: %q is not in the CharacteristicName vocabulary", name)
	}
	return &profile{name: name, unit: unit, median: median, sigma: sigma, decimals: dec}, nil
}

// addKnown adds the field and lab characteristics with hand-set shapes.
func (voc *vocab) addKnown() error {
	for _, c := range fieldParams {
		p, err := voc.newProfile(c.name, c.unit, c.median, c.sigma, c.dec)
		if err != nil {
			return err
		}
		voc.core = append(voc.core, p)
	}
	for _, c := range labParams {
		p, err := voc.newProfile(c.name, c.unit, c.median, c.sigma, c.dec)
		if err != nil {
			return err
		}
		p.speciation, p.fractions, p.method, p.lab = c.spec, c.fractions, c.method, true
		voc.lab = append(voc.lab, p)
	}
	units := voc.v.List(values.ResultUnit)
	for _, p := range append(append([]*profile(nil), voc.core...), voc.lab...) {
		if !units.Contains(p.unit) {
			return fmt.Errorf("gen: unit %q of %s is not a ResultUnit", p.unit, p.name)
		}
	}
	return nil
}

// addTail adds every other characteristic that has a unit, with one
// generic shape; Titanium is kept apart (see chooseCharacteristics).
func (voc *vocab) addTail() {
	taken := map[string]bool{}
	for _, p := range append(append([]*profile(nil), voc.core...), voc.lab...) {
		taken[p.name] = true
	}
	units := voc.v.List(values.ResultUnit)
	tailNames := voc.v.UnitCharacteristics()
	// A fixed order that does not follow the alphabet, so that rarity is
	// spread over the names.
	r := rand.New(rand.NewPCG(7, 11))
	r.Shuffle(len(tailNames), func(i, j int) { tailNames[i], tailNames[j] = tailNames[j], tailNames[i] })
	for _, name := range tailNames {
		if taken[name] {
			continue
		}
		unit := allowedUnit(voc.v, units, name)
		if unit == "" {
			continue
		}
		p := &profile{name: name, unit: unit, median: 0.5, sigma: 1.3, decimals: 3, lab: true,
			fractions: []string{"Total"}, method: [3]string{"LAB-" + strconv.Itoa(len(voc.tail)+100), "PROPRIETARY", "Laboratory method"}}
		if name == "Titanium" {
			voc.titanium = p
			continue
		}
		voc.tail = append(voc.tail, p)
	}
}

// allowedUnit returns the lookup's first unit for name that the ResultUnit
// list allows ("" in the lookup is no unit, spelled "None"). The lookup
// also names units the list spells otherwise (m3/s for m3/sec); a
// characteristic with none of the list's units gets "".
func allowedUnit(v *values.Schema, units *values.Vocabulary, name string) string {
	for _, u := range v.Units(name) {
		if u == "" {
			u = "None"
		}
		if units.Contains(u) {
			return u
		}
	}
	return ""
}

func (voc *vocab) addLocationTypes() error {
	locTypes := voc.v.List(values.MonitoringLocationType)
	sum := 0.0
	for _, t := range locationTypeWeights {
		if !locTypes.Contains(t.t) {
			return fmt.Errorf("gen: %q is not a MonitoringLocationType", t.t)
		}
		sum += t.w
		voc.locTypes = append(voc.locTypes, t.t)
		voc.locTypeCum = append(voc.locTypeCum, sum)
	}
	return nil
}

// addCalendar lists every day from firstYear to the end of 2024 and every
// minute of a day, so that dates and times are drawn by index.
func (voc *vocab) addCalendar() {
	for d := time.Date(voc.firstYear, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2025; d = d.AddDate(0, 0, 1) {
		voc.days = append(voc.days, d.Format(time.DateOnly))
	}
	for m := 0; m < 24*60; m++ {
		voc.times = append(voc.times, fmt.Sprintf("%02d:%02d:00", m/60, m%60))
	}
}

func pickCum(r *rand.Rand, cum []float64) int {
	x := r.Float64() * cum[len(cum)-1]
	return sort.SearchFloat64s(cum, x)
}
