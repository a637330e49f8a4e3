// Package gcfloor keeps the Go collector from running while the heap is
// small: it sets the GC percentage after every collection so that the next
// one starts no earlier than a floor (32 MiB by default in the rate limit
// service), and at GOGC=100 once the live heap is half the floor or more.
//
// Why: a rate limit decision allocates a few kilobytes (most of it in
// grpc-go) and keeps almost nothing, so a server with an 8 MiB live heap
// answering 40,000 decisions a second collects dozens of times a second at
// GOGC=100. Each collection wakes every processor and slows the decisions
// under way. A floor trades a bounded amount of memory (the floor, not a
// multiple of the live heap) for far fewer collections; large live heaps
// (the memory backend with many counters) are collected exactly as before.
// It is the "heap ballast" that Go services used before GOMEMLIMIT, without
// the ballast.
//
// It runs no goroutine of its own: a finalizer that re-arms itself notices
// the end of every collection.
package gcfloor
