package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("scrape %s: %d", url, resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

type dashboard struct {
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("grafana/sluice-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

var (
	// Metric names of this service: envoyproxy/ratelimit's and sluice's own.
	metricName = regexp.MustCompile(`\b(?:ratelimit|sluice)_[a-zA-Z0-9_]+`)
	// name{label="v", …}: the labels a selector matches on.
	selector = regexp.MustCompile(`\b((?:ratelimit|sluice)_[a-zA-Z0-9_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	// by (a, b) / without (a): labels an aggregation keeps.
	grouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// family is the scrape's family for a queried name: histograms are queried
// through their _bucket, _sum and _count series.
func family(mfs map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if mf := mfs[name]; mf != nil {
		return mf
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if mf := mfs[base]; mf != nil && (mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY) {
				return mf
			}
		}
	}
	return nil
}

func hasLabel(mf *dto.MetricFamily, label string) bool {
	if label == "le" && mf.GetType() == dto.MetricType_HISTOGRAM {
		return true
	}
	if label == "instance" || label == "job" {
		return true // added by Prometheus at scrape time
	}
	for _, m := range mf.Metric {
		for _, l := range m.Label {
			if l.GetName() == label {
				return true
			}
		}
	}
	return false
}

// dashboardProblems lists every metric a panel queries that the scrape
// lacks, and every label a query selects or groups by that its metrics do
// not carry.
func dashboardProblems(d dashboard, mfs map[string]*dto.MetricFamily, panels func(title string) bool) (problems, queried []string) {
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	checked := 0
	seen := map[string]bool{}
	for _, p := range d.Panels {
		if !panels(p.Title) {
			continue
		}
		checked++
		if len(p.Targets) == 0 {
			add("panel %q queries nothing", p.Title)
		}
		for _, target := range p.Targets {
			names := metricName.FindAllString(target.Expr, -1)
			if len(names) == 0 {
				add("panel %q: %q queries no metric of this service", p.Title, target.Expr)
			}
			var fams []*dto.MetricFamily
			for _, n := range names {
				seen[n] = true
				mf := family(mfs, n)
				if mf == nil {
					add("panel %q queries %s, which a running sluice does not export", p.Title, n)
					continue
				}
				fams = append(fams, mf)
			}
			for _, sel := range selector.FindAllStringSubmatch(target.Expr, -1) {
				mf := family(mfs, sel[1])
				for _, m := range matcher.FindAllStringSubmatch(sel[2], -1) {
					if mf != nil && !hasLabel(mf, m[1]) {
						add("panel %q selects %s on label %s, which it does not have", p.Title, sel[1], m[1])
					}
				}
			}
			for _, g := range grouping.FindAllStringSubmatch(target.Expr, -1) {
				for _, l := range strings.Split(g[1], ",") {
					l = strings.TrimSpace(l)
					found := false
					for _, mf := range fams {
						found = found || hasLabel(mf, l)
					}
					if l != "" && !found {
						add("panel %q groups by %s, a label none of %v has", p.Title, l, names)
					}
				}
			}
		}
	}
	if checked == 0 {
		add("the dashboard has no such panels")
	}
	for n := range seen {
		queried = append(queried, n)
	}
	sort.Strings(queried)
	return problems, queried
}

// isOData tells the OData API's panels (sluice serve, sluice odata) from
// the rate limit service's.
func isOData(title string) bool { return strings.HasPrefix(title, "OData ") }

// checkDashboard checks the panels panels selects against a scrape of a
// running sluice, and that the check catches each misspelling of typos.
func checkDashboard(t *testing.T, mfs map[string]*dto.MetricFamily, panels func(string) bool, typos [][2]string) {
	t.Helper()
	d := loadDashboard(t)
	problems, queried := dashboardProblems(d, mfs, panels)
	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("dashboard metrics, checked against the scrape: %v", queried)

	raw, _ := json.Marshal(d)
	for _, typo := range typos {
		var bad dashboard
		if err := json.Unmarshal([]byte(strings.ReplaceAll(string(raw), typo[0], typo[1])), &bad); err != nil {
			t.Fatal(err)
		}
		if p, _ := dashboardProblems(bad, mfs, panels); len(p) == 0 {
			t.Errorf("the check missed %s misspelled as %s", typo[0], typo[1])
		}
	}
}
