package transport

import (
	"encoding/json"
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/internal/redact"
)

// newDebugHandler serves the reference's debug paths: an index at /, pprof,
// /rlconfig and /stats (expvar, as the reference: the rate limit counters go
// to the stats sinks, not here).
func newDebugHandler(dumpConfig func() string, extra map[string]DebugEndpoint) http.Handler {
	mux := http.NewServeMux()
	endpoints := map[string]string{
		"/debug/pprof/":        "root of various pprof endpoints. hit for help.",
		"/debug/pprof/profile": "CPU profiling endpoint",
		"/debug/pprof/trace":   "trace endpoint",
		"/rlconfig":            "print out the currently loaded configuration for debugging",
		"/stats":               "print out stats",
	}
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		// As the reference: the type is sniffed from the text, so an empty
		// dump (no configuration) has no Content-Type at all.
		if dump := dumpConfig(); dump != "" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			io.WriteString(w, dump)
		}
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		expvar.Do(func(kv expvar.KeyValue) {
			v := kv.Value.String()
			if kv.Key == "cmdline" {
				// The command line may carry a database URL with its password.
				b, _ := json.Marshal(redact.Args(os.Args))
				v = string(b)
			}
			fmt.Fprintf(w, "%s: %s\n", kv.Key, v)
		})
	})
	for path, ep := range extra {
		endpoints[path] = ep.Help
		mux.Handle(path, ep.Handler)
	}
	// Every other path is the index, as the reference's catch-all "/".
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var lines []string
		for p, help := range endpoints {
			lines = append(lines, p+": "+help)
		}
		sort.Strings(lines)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Join(lines, "\n")+"\n")
	})
	return mux
}

// cmdline is pprof's /debug/pprof/cmdline with passwords masked: the
// command line may carry a database URL (-db postgres://user:password@...).
func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, strings.Join(redact.Args(os.Args), "\x00"))
}

// DebugEndpoint is an extra debug path, added by other parts (metrics, caches).
type DebugEndpoint struct {
	Help    string
	Handler http.Handler
}
