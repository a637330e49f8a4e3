package metrics

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/netx"
)

// Settings choose and configure the statistics sink.
type Settings struct {
	// Disabled turns statistics off (DISABLE_STATS); it wins over every sink setting.
	Disabled bool
	// UseStatsd sends plain statsd over TCP to StatsdHost:StatsdPort (USE_STATSD, default true).
	UseStatsd  bool
	StatsdHost string
	StatsdPort int
	// UseTagged sends tagged (DogStatsD) statsd over UDP to StatsdHost:StatsdPort
	// (USE_DOG_STATSD / USE_TAGGED_STATSD), rewriting names with Mogrifiers.
	UseTagged  bool
	Mogrifiers []Mogrifier
	// UsePull serves the statistics at PullAddr/PullPath in the Prometheus text
	// format (USE_PROMETHEUS / USE_PULLMETRICS).
	UsePull  bool
	PullAddr string
	PullPath string
	// PullMaxConnections caps the connections open at once on the pull
	// metrics port (SLUICE_METRICS_MAX_CONNECTIONS); one beyond it is
	// answered 503 with Retry-After and closed. 0 takes PullFileShare % of
	// the process's open-file limit, negative sets no cap.
	PullMaxConnections int
	// PullMapperFile replaces the embedded statsd_exporter mapping (PROMETHEUS_MAPPER_YAML).
	PullMapperFile string
	// PullResponseTimeMillis keeps ratelimit_service_response_time_seconds in
	// milliseconds, as older versions of the reference did
	// (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
	PullResponseTimeMillis bool
	// ExtraTags are added to every statistic (EXTRA_TAGS).
	ExtraTags map[string]string
	// FlushInterval is how often the sink is sent what changed (STATS_FLUSH_INTERVAL).
	FlushInterval time.Duration
}

// Mogrifier rewrites a statistic's name into a name plus tags for the tagged
// statsd sink. Pattern is a regular expression; NewName and the values of Tags
// may reference its capture groups as $1, $2, ...
type Mogrifier struct {
	Label   string // the name in the mogrifier list, for messages
	Pattern string
	NewName string
	Tags    map[string]string
}

// PullFileShare is the share of the open-file limit, in percent, the pull
// metrics port's connection cap takes by default: a scraper holds one or
// two connections, and the rest of the limit belongs to the serving ports.
const PullFileShare = 2

// pullCap is the pull metrics port's connection cap in effect (0: none).
func (s Settings) pullCap() int {
	switch {
	case s.PullMaxConnections == 0:
		return netx.ShareOfFiles(PullFileShare)
	case s.PullMaxConnections < 0:
		return 0
	}
	return s.PullMaxConnections
}

// DefaultSettings are the reference's defaults: statsd over TCP to localhost:8125, flushed every 10s.
func DefaultSettings() Settings {
	return Settings{
		UseStatsd:     true,
		StatsdHost:    "localhost",
		StatsdPort:    8125,
		PullAddr:      ":9090",
		PullPath:      "/metrics",
		FlushInterval: 10 * time.Second,
	}
}

// ErrSeveralSinks is the reference's fatal message when more than one sink is enabled.
//
//lint:ignore ST1005 the reference's exact message, which operators grep for and tests pin
var ErrSeveralSinks = errors.New("Error: unable to use more than one stats sink at the same time. Set one of USE_DOG_STATSD, USE_STATSD, USE_PROMETHEUS.")

// labelName is what Prometheus accepts as a label name, which EXTRA_TAGS keys become.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// Validate reports the first setting that cannot work.
func (s Settings) Validate() error {
	if s.Disabled {
		return nil
	}
	n := 0
	for _, on := range []bool{s.UseStatsd, s.UseTagged, s.UsePull} {
		if on {
			n++
		}
	}
	if n > 1 {
		return ErrSeveralSinks
	}
	if s.FlushInterval <= 0 {
		return fmt.Errorf("STATS_FLUSH_INTERVAL must be positive, got %v", s.FlushInterval)
	}
	if (s.UseStatsd || s.UseTagged) && (s.StatsdHost == "" || s.StatsdPort <= 0 || s.StatsdPort > 65535) {
		return fmt.Errorf("STATSD_HOST and STATSD_PORT must name a statsd server, got %q and %d", s.StatsdHost, s.StatsdPort)
	}
	for k := range s.ExtraTags {
		if k == "" || strings.ContainsAny(k, ".:|,=#") {
			return fmt.Errorf("EXTRA_TAGS: tag name %q cannot be used in a statsd name", k)
		}
		if s.UsePull && !labelName.MatchString(k) {
			return fmt.Errorf("EXTRA_TAGS: tag name %q is not a Prometheus label name", k)
		}
	}
	if s.UsePull {
		if s.PullAddr == "" {
			return errors.New("PROMETHEUS_ADDR must not be empty")
		}
		if !strings.HasPrefix(s.PullPath, "/") {
			return fmt.Errorf("PROMETHEUS_PATH must start with '/', got %q", s.PullPath)
		}
	}
	if s.UseTagged {
		for _, m := range s.Mogrifiers {
			if _, err := m.compile(); err != nil {
				return err
			}
		}
	}
	return nil
}

// compile checks a mogrifier and returns its pattern.
func (m Mogrifier) compile() (*regexp.Regexp, error) {
	if m.Pattern == "" {
		return nil, fmt.Errorf("tagged statsd mogrifier %s: PATTERN is required", m.Label)
	}
	re, err := regexp.Compile(m.Pattern)
	if err != nil {
		return nil, fmt.Errorf("tagged statsd mogrifier %s: PATTERN: %w", m.Label, err)
	}
	return re, nil
}

// sinkName names the sink the settings select, for logs.
func (s Settings) sinkName() string {
	switch {
	case s.Disabled:
		return "none"
	case s.UseStatsd:
		return "statsd"
	case s.UseTagged:
		return "tagged statsd"
	case s.UsePull:
		return "pull metrics"
	}
	return "stdout"
}
