// Package ratelog keeps a repeated warning from flooding the log: during a
// backend outage every failed decision fails the same way, and a line per
// failure (tens of thousands a second) buries everything else and costs disk.
// The first occurrence is logged at once; further ones within the interval
// are counted and reported as one line, with the count and the last error,
// when the interval ends.
package ratelog
