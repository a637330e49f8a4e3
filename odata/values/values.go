package values

import (
	"bufio"
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
)

//go:embed *.txt *.json LICENSE README.md
var files embed.FS

// Names of the embedded lists, one per enumerated field of the schema.
const (
	ActivityDepthHeightUnit                  = "ActivityDepthHeightUnit"
	ActivityGroupType                        = "ActivityGroupType"
	ActivityMediaName                        = "ActivityMediaName"
	ActivityType                             = "ActivityType"
	CharacteristicName                       = "CharacteristicName"
	MethodSpeciation                         = "MethodSpeciation"
	MonitoringLocationHorizontalAccuracyUnit = "MonitoringLocationHorizontalAccuracyUnit"
	MonitoringLocationHorizontalCRS          = "MonitoringLocationHorizontalCoordinateReferenceSystem"
	MonitoringLocationType                   = "MonitoringLocationType"
	MonitoringLocationVerticalUnit           = "MonitoringLocationVerticalUnit"
	ResultAnalyticalMethodContext            = "ResultAnalyticalMethodContext"
	ResultDetectionCondition                 = "ResultDetectionCondition"
	ResultDetectionQuantitationLimitType     = "ResultDetectionQuantitationLimitType"
	ResultDetectionQuantitationLimitUnit     = "ResultDetectionQuantitationLimitUnit"
	ResultSampleFraction                     = "ResultSampleFraction"
	ResultStatusID                           = "ResultStatusID"
	ResultUnit                               = "ResultUnit"
	ResultValueType                          = "ResultValueType"
	SampleCollectionEquipmentName            = "SampleCollectionEquipmentName"
	activityGroupLookupFile                  = "ActivityType-ActivityGroupType.json"
	characteristicUnitsFile                  = "CharacteristicName-MeasurementUnit.json"
)

// Vocabulary is one list of allowed values, in file order, with a set for
// membership tests.
type Vocabulary struct {
	Name   string
	Values []string
	set    map[string]struct{}
}

// Contains reports whether v is an allowed value.
func (v *Vocabulary) Contains(s string) bool {
	_, ok := v.set[s]
	return ok
}

// Schema is every embedded list and lookup, parsed.
type Schema struct {
	lists   map[string]*Vocabulary
	groupOf map[string]string
	unitsOf map[string][]string
}

// The embedded files never change while the program runs, so they are parsed
// once and shared; a parse failure is a build defect and is reported by Load.
var load = sync.OnceValues(parse)

// Load returns the parsed vocabularies.
func Load() (*Schema, error) { return load() }

func parse() (*Schema, error) {
	s := &Schema{lists: map[string]*Vocabulary{}}
	entries, err := files.ReadDir(".")
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if len(name) < 5 || name[len(name)-4:] != ".txt" {
			continue
		}
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("values: %w", err)
		}
		v := &Vocabulary{Name: name[:len(name)-4], set: map[string]struct{}{}}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				continue
			}
			if _, dup := v.set[line]; dup {
				continue
			}
			v.set[line] = struct{}{}
			v.Values = append(v.Values, line)
		}
		s.lists[v.Name] = v
	}

	b, err := files.ReadFile(activityGroupLookupFile)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	if err := json.Unmarshal(b, &s.groupOf); err != nil {
		return nil, fmt.Errorf("values: %s: %w", activityGroupLookupFile, err)
	}
	b, err = files.ReadFile(characteristicUnitsFile)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	if err := json.Unmarshal(b, &s.unitsOf); err != nil {
		return nil, fmt.Errorf("values: %s: %w", characteristicUnitsFile, err)
	}
	return s, nil
}

// List returns the named vocabulary, or nil when there is no such list.
func (s *Schema) List(name string) *Vocabulary { return s.lists[name] }

// GroupType derives ActivityGroupType from ActivityType through the schema's
// lookup.
func (s *Schema) GroupType(activityType string) (string, bool) {
	g, ok := s.groupOf[activityType]
	return g, ok
}

// Units returns the typical measurement units of a characteristic; an empty
// string in the list means the characteristic has no unit (pH).
func (s *Schema) Units(characteristic string) []string { return s.unitsOf[characteristic] }

// UnitCharacteristics returns the allowed characteristics that have a typical
// unit, sorted, so a generator can pick them deterministically. The upstream
// lookup also names characteristics that are not in the allowed list; those
// are left out, since an importer would reject them.
func (s *Schema) UnitCharacteristics() []string {
	names := s.lists[CharacteristicName]
	out := make([]string, 0, len(s.unitsOf))
	for k := range s.unitsOf {
		if names != nil && names.Contains(k) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
