// Package settings is the rate limit service's edge with its environment:
// it reads every variable the reference implementation and sluice define
// (REDIS_*, USE_STATSD, SLUICE_*, …; both spellings of the renamed ones),
// once, into small typed structs, and validates them together, so that a
// bad value is one clear error naming the variable before anything starts.
//
// Nothing below the edge reads the environment: package server assembles
// the service from a Settings value, and engine, actors, the wire and the
// backends get their own Options out of it. EnvWarnings names variables that look like
// a misspelling of a known one (they are otherwise ignored, as upstream
// ignores them).
package settings
