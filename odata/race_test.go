//go:build race

package odata

const raceEnabled = true
