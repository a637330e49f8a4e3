// Package layering holds only tests: they keep the dependency direction of
// DESIGN.md (cmd → server → transport, actors, lease, quota → engine;
// odata → engine/actors) from rotting, and only the commands importing the
// assembly (package server).
package layering
