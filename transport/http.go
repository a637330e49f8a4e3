package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/internal/ratelog"
)

// maxJSONBody bounds a /json request body; a real request is a few hundred bytes.
const maxJSONBody = 1 << 20

// newHTTPHandler serves /json, /healthcheck and /livez, any method, exact
// paths; every other path is the standard 404.
//
// /healthcheck is readiness, as the reference's: 500 while the backend is
// unreachable (with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION), before the
// first rules with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, and from
// SIGTERM on. /livez is liveness: 200 whenever the process serves HTTP, so
// that a backend outage takes replicas out of the Service without
// restarting them (a restart cures no outage, and its back-off can outlast
// it).
func newHTTPHandler(d Decider, healthy func() bool, log *slog.Logger, errs *errorLog) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json", jsonHandler(d, log, errs))
	mux.HandleFunc("/healthcheck", healthHandler(healthy))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "OK")
	})
	return mux
}

func jsonHandler(d Decider, log *slog.Logger, errs *errorLog) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, maxJSONBody+1))
		if err != nil || len(body) > maxJSONBody {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			log.Debug("error: " + err.Error())
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		// Like the reference, a client hanging up does not abandon the decision
		// half-way; the engine's own timeout still bounds it.
		resp, err := decide(context.WithoutCancel(r.Context()), d, &req)
		if err != nil {
			errs.warn(err)
			// The reason is in the log line above. A request error is the
			// reference's plain "Bad Request"; a service that cannot decide
			// says why, with 503 (a documented difference).
			if errors.Is(err, engine.ErrNoConfig) || errors.Is(err, engine.ErrBackend) {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch resp.GetOverallCode() {
		case rlsv3.RateLimitResponse_OK:
			w.WriteHeader(http.StatusOK)
		case rlsv3.RateLimitResponse_OVER_LIMIT:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusInternalServerError)
		}
		w.Write(out)
	}
}

func healthHandler(healthy func() bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if !healthy() {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK")
	}
}

// errorLog logs failed decisions as the reference does ("error: ..."), but
// at most one line per interval for each kind of failure, with a count:
// during a backend outage every decision fails, and a line each would flood
// the log (tens of thousands of lines a second).
type errorLog struct {
	backend, request *ratelog.Warner
}

func newErrorLog(log *slog.Logger, every time.Duration) *errorLog {
	return &errorLog{backend: ratelog.New(log, "error", every), request: ratelog.New(log, "error", every)}
}

func (e *errorLog) warn(err error) {
	if errors.Is(err, engine.ErrBackend) || errors.Is(err, engine.ErrNoConfig) {
		e.backend.Warn(err)
		return
	}
	e.request.Warn(err)
}

// close reports what is still counted.
func (e *errorLog) close() {
	e.backend.Close()
	e.request.Close()
}
