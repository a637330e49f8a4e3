// Package redact hides secrets in text that is printed: the password of a
// URL's user information (postgres://user:password@host/db) and the value of
// a password=... parameter (a keyword/value DSN, a URL query). Everything the
// service prints about its command line or its database goes through it: the
// debug port's /debug/pprof/cmdline and /stats, log lines and banners.
package redact
