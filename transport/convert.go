package transport

import (
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/engine"
)

// toProtoResponse builds the wire response.
func toProtoResponse(r *engine.Response) (*rlsv3.RateLimitResponse, error) {
	out := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_Code(r.OverallCode),
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	for i, st := range r.Statuses {
		ps := &rlsv3.RateLimitResponse_DescriptorStatus{
			Code:           rlsv3.RateLimitResponse_Code(st.Code),
			LimitRemaining: st.LimitRemaining,
		}
		if l := st.CurrentLimit; l != nil {
			ps.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
				Name:            l.Name,
				RequestsPerUnit: l.RequestsPerUnit,
				Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(l.Unit),
			}
		}
		if st.DurationUntilReset > 0 {
			ps.DurationUntilReset = durationpb.New(st.DurationUntilReset)
		}
		out.Statuses[i] = ps
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Key, Value: h.Value})
	}
	if r.DynamicMetadata != nil {
		md, err := structpb.NewStruct(r.DynamicMetadata)
		if err != nil {
			return nil, fmt.Errorf("encoding dynamic metadata: %w", err)
		}
		out.DynamicMetadata = md
	}
	return out, nil
}
