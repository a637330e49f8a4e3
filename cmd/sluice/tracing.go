package main

import (
	"context"

	"github.com/sluicehq/sluice/transport/tracing"
)

// newTracing starts an OTLP exporter for the client's spans.
func newTracing(s tracing.Settings) (*tracing.Tracing, error) {
	t, err := tracing.New(s, tracing.Options{})
	if err != nil {
		return nil, err
	}
	if err := t.Start(context.Background()); err != nil {
		return nil, err
	}
	return t, nil
}
