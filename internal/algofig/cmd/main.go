// Command algofig writes the algorithms figure of docs/configuration.md (SVG) to stdout.
package main

import (
	"fmt"
	"os"

	"github.com/sluicehq/sluice/internal/algofig"
)

func main() {
	series, err := algofig.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "algofig:", err)
		os.Exit(1)
	}
	os.Stdout.Write(algofig.SVG(series))
}
