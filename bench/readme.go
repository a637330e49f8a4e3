package main

import (
	"fmt"
	"os"
	"strings"
)

// The benchmark section of docs/benchmarks.md lies between these markers; spliceReadme
// replaces it with a results file, so the table there is always one run's.
const (
	readmeBegin = "<!-- bench:begin (make bench-readme replaces this section with bench/results/latest.md) -->"
	readmeEnd   = "<!-- bench:end -->"
)

// spliceReadme puts the contents of results between readme's markers.
func spliceReadme(readme, results string) error {
	doc, err := os.ReadFile(readme)
	if err != nil {
		return err
	}
	table, err := os.ReadFile(results)
	if err != nil {
		return fmt.Errorf("%w (run make bench first)", err)
	}
	out, err := splice(string(doc), string(table))
	if err != nil {
		return fmt.Errorf("%s: %w", readme, err)
	}
	return os.WriteFile(readme, []byte(out), 0o644)
}

func splice(doc, table string) (string, error) {
	i := strings.Index(doc, readmeBegin)
	j := strings.Index(doc, readmeEnd)
	if i < 0 || j < i {
		return "", fmt.Errorf("no %q … %q section", readmeBegin, readmeEnd)
	}
	// The results' headings are one level too high inside the benchmark page's section.
	table = strings.ReplaceAll("\n"+strings.TrimSpace(table), "\n## ", "\n### ")
	return doc[:i+len(readmeBegin)] + "\n" + strings.TrimSpace(table) + "\n\n" + doc[j:], nil
}
