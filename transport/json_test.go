package transport_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestJSONTable covers the rows of ratelimit-compat.md §2.2, comparing bodies
// semantically. sluice's deliberate differences (503 for no configuration and
// for backend failures) are in their own tests.
func TestJSONTable(t *testing.T) {
	const two = `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`
	type step struct {
		body   string
		status int
		want   string // JSON, or the exact text for non-JSON answers
	}
	badRequest := "Bad Request\n"
	cases := []struct {
		name  string
		steps []step
	}{
		{"ok, remaining 0 omitted, over", []step{
			{two, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"56s"}]}`},
			{two, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"56s"}]}`},
			{two, 429, `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"56s"}]}`},
		}},
		{"unknown domain", []step{{`{"domain":"nope","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`}}},
		{"malformed JSON", []step{{`{"domain":"probe",`, 400, badRequest}}},
		{"empty body", []step{{``, 400, badRequest}}},
		{"unknown field", []step{{`{"domain":"probe","bogus":1,"descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`, 400, badRequest}}},
		{"negative uint", []step{{`{"domain":"probe","hitsAddend":-1,"descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`, 400, badRequest}}},
		{"bad enum in override", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"x"}],"limit":{"requestsPerUnit":7,"unit":"FOO"}}]}`, 400, badRequest}}},
		{"empty descriptor list", []step{{`{"domain":"probe","descriptors":[]}`, 400, badRequest}}},
		{"no descriptors field", []step{{`{"domain":"probe"}`, 400, badRequest}}},
		{"empty domain", []step{{`{"domain":"","descriptors":[{"entries":[{"key":"k","value":"two"}]}]}`, 400, badRequest}}},
		// hits_addend above INCRBY's int64 range is the caller's error.
		{"hits_addend over int64", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"big"}],"hitsAddend":"18446744073709551615"}]}`, 400, badRequest},
			{`{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"big"}]}]}`, 200,
				`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":9,"durationUntilReset":"56s"}]}`}}},
		{"unlimited", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"free","value":"x"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","limitRemaining":4294967295}]}`}}},
		{"shadow mode", []step{
			{`{"domain":"probe","descriptors":[{"entries":[{"key":"shadow","value":"a"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"56s"}]}`},
			{`{"domain":"probe","descriptors":[{"entries":[{"key":"shadow","value":"a"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"MINUTE"},"durationUntilReset":"56s"}]}`},
		}},
		{"key with no rate_limit", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"nolimit","value":"x"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`}}},
		{"key not in config", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"zzz","value":"x"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`}}},
		{"limit 0", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"zero","value":"x"}]}]}`, 429, `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"unit":"MINUTE"},"durationUntilReset":"56s"}]}`}}},
		{"wildcard", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"wild","value":"prefix1"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"56s"}]}`}}},
		{"request hitsAddend", []step{{`{"domain":"probe","hitsAddend":3,"descriptors":[{"entries":[{"key":"near","value":"a"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":7,"durationUntilReset":"56s"}]}`}}},
		{"snake_case and string numbers", []step{
			{`{"domain":"probe","hits_addend":5,"descriptors":[{"entries":[{"key":"near","value":"a"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":5,"durationUntilReset":"56s"}]}`},
			{`{"domain":"probe","hitsAddend":"2","descriptors":[{"entries":[{"key":"near","value":"a"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":3,"durationUntilReset":"56s"}]}`},
		}},
		{"descriptor hitsAddend 0 then 5", []step{
			{`{"domain":"probe","hitsAddend":8,"descriptors":[{"entries":[{"key":"near","value":"a"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"56s"}]}`},
			{`{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"a"}],"hitsAddend":0}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"56s"}]}`},
			{`{"domain":"probe","descriptors":[{"entries":[{"key":"near","value":"a"}],"hitsAddend":5}]}`, 429, `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"durationUntilReset":"56s"}]}`},
		}},
		{"multiple descriptors", []step{
			{two, 200, ""}, {two, 200, ""},
			{`{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"hour5"}]},{"entries":[{"key":"k","value":"two"}]},{"entries":[{"key":"free","value":"x"}]},{"entries":[{"key":"zzz","value":"x"}]}]}`, 429,
				`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":5,"unit":"HOUR"},"limitRemaining":4,"durationUntilReset":"2936s"},{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"durationUntilReset":"56s"},{"code":"OK","limitRemaining":4294967295},{"code":"OK"}]}`},
		}},
		{"request limit override", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"zzz","value":"o"}],"limit":{"requestsPerUnit":7,"unit":"HOUR"}}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":7,"unit":"HOUR"},"limitRemaining":6,"durationUntilReset":"2936s"}]}`}}},
		{"numeric enum override", []step{{`{"domain":"probe","descriptors":[{"entries":[{"key":"zzz","value":"w"}],"limit":{"requestsPerUnit":7,"unit":7}}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":7,"unit":"WEEK"},"limitRemaining":6,"durationUntilReset":"337736s"}]}`}}},
		{"empty entries", []step{{`{"domain":"probe","descriptors":[{"entries":[]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`}}},
		{"depth mismatch", []step{{`{"domain":"rl","descriptors":[{"entries":[{"key":"category","value":"account"},{"key":"extra","value":"x"}]}]}`, 200, `{"overallCode":"OK","statuses":[{"code":"OK"}]}`}}},
		{"replaces", []step{{`{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"f"},{"key":"bar","value":"banned"}]},{"entries":[{"key":"source_cluster","value":"proxy"},{"key":"destination_cluster","value":"override"}]}]}`, 200,
			`{"overallCode":"OK","statuses":[{"code":"OK"},{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"56s"}]}`}}},
		{"banned alone: name in currentLimit", []step{{`{"domain":"rl","descriptors":[{"entries":[{"key":"foo","value":"f"},{"key":"bar","value":"banned"}]}]}`, 429,
			`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"banned_limit","unit":"MINUTE"},"durationUntilReset":"56s"}]}`}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, nil, map[string]string{"probe.yaml": readFile(t, "probe.yaml"), "rl.yaml": readFile(t, "rl.yaml")})
			for i, s := range tc.steps {
				status, hdr, body := h.Post(t, "/json", s.body)
				if status != s.status {
					t.Fatalf("step %d: status %d, want %d (body %q)", i+1, status, s.status, body)
				}
				if s.want == "" {
					continue
				}
				if strings.HasPrefix(s.want, "{") {
					if ct := hdr.Get("Content-Type"); ct != "application/json" {
						t.Errorf("step %d: Content-Type %q", i+1, ct)
					}
					if !jsonEqual(t, body, s.want) {
						t.Errorf("step %d:\n got %s\nwant %s", i+1, body, s.want)
					}
					continue
				}
				if body != s.want || hdr.Get("Content-Type") != "text/plain; charset=utf-8" || hdr.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("step %d: body %q type %q nosniff %q, want %q", i+1, body, hdr.Get("Content-Type"), hdr.Get("X-Content-Type-Options"), s.want)
				}
			}
		})
	}
}

func TestJSONMethodsAndPaths(t *testing.T) {
	h := start(t, nil, map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	// Any method reaches /json; a GET has no body, so it is a bad request.
	if status, body := h.Get(t, h.HTTP+"/json"); status != 400 || body != "Bad Request\n" {
		t.Errorf("GET /json: %d %q", status, body)
	}
	for _, p := range []string{"/", "/json/", "/nope"} {
		if status, body := h.Get(t, h.HTTP+p); status != 404 || body != "404 page not found\n" {
			t.Errorf("GET %s: %d %q", p, status, body)
		}
	}
	// /healthcheck answers any method.
	status, hdr, body := h.Post(t, "/healthcheck", "")
	if status != 200 || body != "OK" || hdr.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("POST /healthcheck: %d %q %q", status, body, hdr.Get("Content-Type"))
	}
}

func TestHeadersAndDynamicMetadata(t *testing.T) {
	h := start(t, map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "RESPONSE_DYNAMIC_METADATA": "true"},
		map[string]string{"probe.yaml": readFile(t, "probe.yaml")})
	status, _, body := h.Post(t, "/json", `{"domain":"probe","descriptors":[{"entries":[{"key":"k","value":"hour5"}]},{"entries":[{"key":"k","value":"two"}]}]}`)
	want := `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":5,"unit":"HOUR"},"limitRemaining":4,"durationUntilReset":"2936s"},{"code":"OK","currentLimit":{"requestsPerUnit":2,"unit":"MINUTE"},"limitRemaining":1,"durationUntilReset":"56s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"2"},{"key":"RateLimit-Remaining","value":"1"},{"key":"RateLimit-Reset","value":"56"}],"dynamicMetadata":{"descriptors":[{"entries":["k=hour5"]},{"entries":["k=two"]}],"domain":"probe"}}`
	if status != http.StatusOK || !jsonEqual(t, body, want) {
		t.Fatalf("%d\n got %s\nwant %s", status, body, want)
	}
}

// TestAlgorithmsEndToEnd: a rule file using sluice's algorithm extension
// loads from the runtime directory, /json answers per algorithm (a bucket's
// remaining tokens and time to the next one, sub-second), and /rlconfig shows
// the algorithm.
func TestAlgorithmsEndToEnd(t *testing.T) {
	rules := "domain: algo\ndescriptors:\n" +
		"  - {key: tb, rate_limit: {unit: second, requests_per_unit: 4, algorithm: token_bucket, burst: 2}}\n" +
		"  - {key: sw, rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_window}}\n"
	h := start(t, map[string]string{"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, map[string]string{"algo.yaml": rules})
	steps := []struct{ desc, want string }{
		{"tb", `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":4,"unit":"SECOND"},"limitRemaining":1,"durationUntilReset":"0.250s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"4"},{"key":"RateLimit-Remaining","value":"1"},{"key":"RateLimit-Reset","value":"1"}]}`},
		{"tb", `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":4,"unit":"SECOND"},"durationUntilReset":"0.250s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"4"},{"key":"RateLimit-Remaining","value":"0"},{"key":"RateLimit-Reset","value":"1"}]}`},
		{"tb", `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":4,"unit":"SECOND"},"durationUntilReset":"0.250s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"4"},{"key":"RateLimit-Remaining","value":"0"},{"key":"RateLimit-Reset","value":"1"}]}`},
		{"sw", `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":2,"durationUntilReset":"56s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"3"},{"key":"RateLimit-Remaining","value":"2"},{"key":"RateLimit-Reset","value":"56"}]}`},
	}
	for i, s := range steps {
		status, _, body := h.Post(t, "/json", `{"domain":"algo","descriptors":[{"entries":[{"key":"`+s.desc+`","value":"x"}]}]}`)
		if status != http.StatusOK && !(status == http.StatusTooManyRequests && strings.Contains(s.want, "OVER_LIMIT")) || !jsonEqual(t, body, s.want) {
			t.Fatalf("step %d: %d\n got %s\nwant %s", i, status, body, s.want)
		}
	}
	_, dump := h.Get(t, h.Debug+"/rlconfig")
	if !strings.Contains(dump, "algo.tb: unit=SECOND requests_per_unit=4, shadow_mode: false, quota_mode: false, algorithm: token_bucket, burst: 2\n") ||
		!strings.Contains(dump, "algo.sw: unit=MINUTE requests_per_unit=3, shadow_mode: false, quota_mode: false, algorithm: sliding_window\n") {
		t.Fatalf("/rlconfig:\n%s", dump)
	}
}
