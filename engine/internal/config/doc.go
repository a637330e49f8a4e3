// Package config holds the types rule files are decoded into. Their package
// and type names are the reference implementation's (envoyproxy/ratelimit's
// src/config), because yaml.v2 names the target type in its errors
// ("cannot unmarshal !!str `x` into []config.YamlDescriptor"), and those
// texts are part of what a drop-in replacement answers. The engine turns
// them into its own model at once.
package config
