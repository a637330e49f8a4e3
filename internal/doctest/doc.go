// Package doctest holds no code: its test runs the shell examples of
// README.md, docs/*.md and loadtest/README.md as a reader would, because an
// example nobody ran is a guess.
//
// Every fenced block in those files names its language. Blocks marked sh run
// with bash -e -o pipefail in a scratch copy of the repository (symlinks to
// its top-level entries, so files an example writes land in the scratch
// directory), with a freshly built sluice first on PATH; a non-zero exit
// fails the test. A block that cannot run here (it needs docker, a cluster,
// a registry, or it is a synopsis) is preceded by
//
//	<!-- doc-test: skip (the reason) -->
//
// and one that needs more than the default minute by
//
//	<!-- doc-test: timeout 120s -->
//
// That time is a quiet machine's, with room; the test calls a block hung
// only after five times as long, so that a loaded machine does not fail
// an example that works.
//
// Every file path those docs and the k6 scripts cite (a path with a
// directory) must be a file of the repository.
package doctest
