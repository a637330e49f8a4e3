// Package xds loads rate limit rules from a management server
// (CONFIG_TYPE=GRPC_XDS_SOTW): a state-of-the-world ADS stream with a wildcard
// subscription to ratelimit.config.ratelimit.v3.RateLimitConfig, through
// go-control-plane's SotW client. Every response is converted to the same
// rule model as the YAML files (engine.DomainConfig), validated, handed on,
// and only then acknowledged; a response that cannot be unmarshalled or
// validated is NACKed with the error text and the rules in use stay.
//
// The stream is reopened after the server goes away: after a connection
// that could not be made, every CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL;
// after a stream that broke, with exponential backoff (XDS_CLIENT_BACKOFF_*).
package xds
