package server

import (
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/sluicehq/sluice/settings"
)

// NewLogger builds the service logger. Text lines carry time, level and msg;
// JSON lines carry @timestamp, @message and level, as the reference's logrus
// formats do, so log pipelines keep their parsers.
func NewLogger(w io.Writer, s settings.LogSettings) (*slog.Logger, error) {
	level, err := settings.ParseLevel(s.Level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	json := strings.EqualFold(s.Format, "json")
	opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) > 0 {
			return a
		}
		switch a.Key {
		case slog.LevelKey:
			a.Value = slog.StringValue(levelName(a.Value.Any().(slog.Level)))
		case slog.MessageKey:
			if json {
				a.Key = "@message"
			}
		case slog.TimeKey:
			if json {
				a.Key = "@timestamp"
				a.Value = slog.StringValue(a.Value.Time().Format(time.RFC3339Nano))
			}
		}
		return a
	}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

func levelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warning"
	}
	return "error"
}
