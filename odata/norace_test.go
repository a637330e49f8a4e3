//go:build !race

package odata

const raceEnabled = false
