// Package layering holds only a test: it keeps the dependency direction of
// DESIGN.md (transport → actors → engine; odata → engine/actors) from rotting.
package layering
