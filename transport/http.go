package transport

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/engine"
)

// maxJSONBody bounds a /json request body; a real request is a few hundred bytes.
const maxJSONBody = 1 << 20

// newHTTPHandler serves /json and /healthcheck, any method, exact paths; every
// other path is the standard 404.
func newHTTPHandler(d Decider, h *Health, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/json", jsonHandler(d, log))
	mux.HandleFunc("/healthcheck", healthHandler(h))
	return mux
}

func jsonHandler(d Decider, log *slog.Logger) http.HandlerFunc {
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
			log.Warn("error: " + err.Error())
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

func healthHandler(h *Health) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if !h.OK() {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK")
	}
}
