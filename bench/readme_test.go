package main

import (
	"strings"
	"testing"
)

func TestSplice(t *testing.T) {
	doc := "# x\n\n" + readmeBegin + "\nold table\n" + readmeEnd + "\n\nafter\n"
	got, err := splice(doc, "## Rate limit benchmark\n\n| a |\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# x\n\n" + readmeBegin + "\n### Rate limit benchmark\n\n| a |\n\n" + readmeEnd + "\n\nafter\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	// Splicing again gives the same document.
	again, _ := splice(got, "## Rate limit benchmark\n\n| a |\n")
	if again != got {
		t.Fatalf("not idempotent:\n%s", again)
	}
	if _, err := splice("no markers", "x"); err == nil || !strings.Contains(err.Error(), "bench:begin") {
		t.Fatalf("missing markers: %v", err)
	}
}
