package gen

import (
	"context"
	"math"

	"github.com/sluicehq/sluice/odata/query"
	"github.com/sluicehq/sluice/odata/sqlstore"
)

// NumberLocations gives the locations the ids a loader would give them in
// an empty store (first, first+1, ...), for callers that generate rows
// without loading them.
func (g *Generator) NumberLocations(first int64) {
	for i, loc := range g.locations {
		loc.ID = first + int64(i)
	}
}

// Next fills o with the next observation; it returns false after Rows
// observations. Rows come dataset by dataset, as uploads do.
func (g *Generator) Next(o *sqlstore.Observation) bool {
	for g.left == 0 {
		if g.planIdx >= len(g.plans) {
			return false
		}
		g.left = g.plans[g.planIdx].rows
		g.planIdx++
	}
	g.left--
	g.emitted++
	g.fill(g.plans[g.planIdx-1], o)
	return true
}

var (
	fieldActivities = []string{"Field Msr/Obs", "Field Msr/Obs", "Field Msr/Obs", "Field Msr/Obs", "Field Msr/Obs",
		"Field Msr/Obs", "Field Msr/Obs-Portable Data Logger", "Quality Control Field Replicate Msr/Obs"}
	labActivities = []string{"Sample-Routine", "Sample-Routine", "Sample-Routine", "Sample-Routine", "Sample-Routine",
		"Sample-Routine", "Sample-Routine", "Sample-Routine", "Sample-Routine", "Sample-Routine", "Sample-Routine",
		"Quality Control Sample-Field Replicate", "Quality Control Sample-Field Blank", "Sample-Integrated Vertical Profile"}
)

// tail is an observation's columns after its dataset and location.
type tail = [query.TailLen]sqlstore.Cell

// fill draws one observation of plan: where and what, then the activity,
// the result and how it was analysed. The draws from g.rng keep this order
// so that a seed always gives the same rows.
func (g *Generator) fill(plan *datasetPlan, o *sqlstore.Observation) {
	r := g.rng
	loc := plan.locs[r.IntN(len(plan.locs))]
	p := plan.chars[pickCum(r, plan.charCum)]
	*o = sqlstore.Observation{DOI: loc.DOI, LocationID: loc.ID}
	t := &o.Tail
	day := g.fillActivity(plan, p, loc, t)
	g.fillResult(p, t)
	g.fillMethod(plan, p, day, t)
}

// fillActivity sets how and when the sample was taken; it returns the
// index of its day.
func (g *Generator) fillActivity(plan *datasetPlan, p *profile, loc *sqlstore.Location, t *tail) int {
	r, voc := g.rng, g.voc
	text := sqlstore.Text
	switch {
	case plan.kind == kindContinuous:
		t[query.ActivityType] = text("Field Msr/Obs-Continuous Time Series")
	case p.lab:
		t[query.ActivityType] = text(labActivities[r.IntN(len(labActivities))])
	default:
		t[query.ActivityType] = text(fieldActivities[r.IntN(len(fieldActivities))])
	}
	media := "Surface Water"
	switch loc.Type {
	case "Well", "Spring":
		media = "Groundwater"
	case "Ocean":
		media = "Ocean Water"
	}
	if p.lab && r.IntN(50) == 0 {
		media = "Surface Water Sediment"
	}
	t[query.ActivityMediaName] = text(media)
	day := plan.firstDay + r.IntN(plan.spanDays)
	t[query.ActivityStartDate] = text(voc.days[day])
	if r.IntN(100) < 92 {
		t[query.ActivityStartTime] = text(voc.times[r.IntN(len(voc.times))])
	}
	if t[query.ActivityType].S == "Sample-Integrated Vertical Profile" {
		t[query.ActivityEndDate] = t[query.ActivityStartDate]
	}
	if r.IntN(10) < 7 {
		t[query.ActivityDepthHeightMeasure] = sqlstore.Num(round(0.1+r.Float64()*2, 1))
		t[query.ActivityDepthHeightUnit] = text("m")
	}
	if r.IntN(10) < 6 {
		t[query.SampleCollectionEquipmentName] = text(plan.equipment)
	}
	return day
}

// fillResult sets what was measured and its value, or, for some lab
// results, a detection condition instead of a value.
func (g *Generator) fillResult(p *profile, t *tail) {
	r := g.rng
	text := sqlstore.Text
	t[query.CharacteristicName] = text(p.name)
	if p.speciation != "" {
		t[query.MethodSpeciation] = text(p.speciation)
	}
	if len(p.fractions) > 0 {
		t[query.ResultSampleFraction] = text(p.fractions[r.IntN(len(p.fractions))])
	}
	if p.lab && r.IntN(100) < 8 {
		// Not quantified: a detection condition and its limit, no value.
		t[query.ResultDetectionCondition] = text(detections[r.IntN(len(detections))])
		t[query.ResultDetectionQuantitationLimitMeasure] = sqlstore.Num(round(p.median/10, p.decimals+1))
		t[query.ResultDetectionQuantitationLimitUnit] = text(p.unit)
		t[query.ResultDetectionQuantitationLimitType] = text([]string{"Method Detection Level", "Reporting Limit"}[r.IntN(2)])
	} else {
		v := round(p.median*math.Exp(p.sigma*r.NormFloat64()), p.decimals)
		t[query.ResultValue] = sqlstore.Num(v)
		t[query.ResultUnit] = text(p.unit)
	}
	switch x := r.IntN(100); {
	case x < 75:
		t[query.ResultValueType] = text("Actual")
	case x < 80:
		t[query.ResultValueType] = text("Calculated")
	}
	switch x := r.IntN(100); {
	case x < 70:
		t[query.ResultStatusID] = text("Accepted")
	case x < 80:
		t[query.ResultStatusID] = text("Final")
	}
	if r.IntN(50) == 0 {
		t[query.ResultComment] = text(comments[r.IntN(len(comments))])
	}
}

// fillMethod sets the analytical method: the lab's for lab parameters,
// the field meter's otherwise.
func (g *Generator) fillMethod(plan *datasetPlan, p *profile, day int, t *tail) {
	r, voc := g.rng, g.voc
	text := sqlstore.Text
	if !p.lab {
		t[query.ResultAnalyticalMethodContext] = text(plan.method[1])
		t[query.ResultAnalyticalMethodName] = text(plan.method[2])
		return
	}
	if p.method[0] != "" {
		t[query.ResultAnalyticalMethodID] = text(p.method[0])
	}
	t[query.ResultAnalyticalMethodContext] = text(p.method[1])
	t[query.ResultAnalyticalMethodName] = text(p.method[2])
	t[query.AnalysisStartDate] = text(voc.days[min(day+1+r.IntN(14), len(voc.days)-1)])
	t[query.LaboratoryName] = text(plan.lab)
	t[query.LaboratorySampleID] = text(g.labIDs[r.IntN(len(g.labIDs))])
}

// Load generates the data set of g into db in one transaction, reporting
// the number of observations written so far to progress (may be nil).
func Load(ctx context.Context, db *sqlstore.DB, g *Generator, progress func(done int64)) (sqlstore.LoadResult, error) {
	return db.Load(ctx, func(l *sqlstore.Loader) error {
		for _, d := range g.Datasets() {
			if err := l.AddDataset(d); err != nil {
				return err
			}
		}
		for _, loc := range g.Locations() {
			if err := l.AddLocation(loc); err != nil {
				return err
			}
		}
		_, err := l.AddObservations(func(o *sqlstore.Observation) (bool, error) {
			if g.emitted%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return false, err
				}
				if progress != nil {
					progress(g.emitted)
				}
			}
			if !g.Next(o) {
				if progress != nil {
					progress(g.emitted)
				}
				return false, nil
			}
			return true, nil
		})
		return err
	})
}
