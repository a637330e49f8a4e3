// Package housekeeping holds tests that keep the code base readable: no
// file or function in the rate limit packages grows past what a reader
// takes in at once. It has no code of its own.
package housekeeping
