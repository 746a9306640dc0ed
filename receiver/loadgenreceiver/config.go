package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configretry"
)

// Signal names accepted by the signals key.
const (
	signalTraces  = "traces"
	signalMetrics = "metrics"
	signalLogs    = "logs"
)

// minSpansPerUser is the smallest trace; a user's span share must fill at
// least one trace.
const minSpansPerUser = minSpansPerTrace

// Config is the loadgen receiver's configuration. Each user produces exactly
// events_per_user items: round(events_per_user × metrics_fraction) metric
// data points, round(events_per_user × logs_fraction) log records, and spans
// for the rest, grouped into traces of 5 to 12 spans.
type Config struct {
	// users is how many simulated users generate telemetry. Default 10;
	// 1 to 1,000,000,000.
	Users int `mapstructure:"users"`
	// events_per_user is the items (spans + metric data points + log
	// records) each user produces. Default 1900, as in the article; at most
	// 10,000,000, and large enough that the span share is at least 5.
	EventsPerUser int `mapstructure:"events_per_user"`
	// metrics_fraction is the share of each user's events that are metric
	// data points. Default 0.25; 0 to 1, and with logs_fraction below 1.
	MetricsFraction float64 `mapstructure:"metrics_fraction"`
	// logs_fraction is the share of each user's events that are log
	// records. Default 0.30; 0 to 1, and with metrics_fraction below 1.
	LogsFraction float64 `mapstructure:"logs_fraction"`
	// rate caps the items (spans + data points + log records) sent per
	// second, over all workers and signals. Default 0: unlimited; >= 0.
	Rate float64 `mapstructure:"rate"`
	// duration stops generating after this long even if users remain.
	// Default 0: run until every user is done; >= 0.
	Duration time.Duration `mapstructure:"duration"`
	// concurrency is the number of generating goroutines; each owns every
	// concurrency-th user. Default 1; 1 to 1024.
	Concurrency int `mapstructure:"concurrency"`
	// seed seeds every random choice (PCG), so the same seed gives the same
	// ids, attributes and payloads. Default 1; any unsigned 64-bit integer.
	Seed uint64 `mapstructure:"seed"`
	// batch_size is the items per ConsumeTraces, ConsumeMetrics or
	// ConsumeLogs call. Default 500; 1 to 1,000,000.
	BatchSize int `mapstructure:"batch_size"`
	// signals lists which of traces, metrics and logs to generate. Default
	// empty: every signal whose pipeline lists this receiver. A signal's
	// share is skipped, not given to the others, so the data is the same
	// whichever signals are on.
	Signals []string `mapstructure:"signals"`
	// pregenerate builds every batch (all users, signals and workers) in
	// memory before generation starts, then only sends them, so a benchmark
	// does not pay generation CPU while the clock runs. Same batches, same
	// order. Default false; needs a load bounded by users, so no duration.
	Pregenerate bool `mapstructure:"pregenerate"`
	// warmup_users generates, before generation starts, this many users'
	// events of another seed (seed + 1: other ids, the same shapes) through
	// the same pipeline, then waits warmup_pause: a benchmark then times a
	// collector that has already written a burst, as a running one has,
	// instead of a process's first touch of its memory and its database
	// connections' first rows. The warm-up is not in the receiver's counts.
	// Default 0: none; 0 to 1,000,000,000.
	WarmupUsers int `mapstructure:"warmup_users"`
	// warmup_pause is the wait between the warm-up's last batch and the
	// start of generation, for the exporter to write what it holds.
	// Default 5s; >= 0.
	WarmupPause time.Duration `mapstructure:"warmup_pause"`
	// retry_on_failure resends a batch the pipeline refused with a
	// retryable error, as an OTel SDK's OTLP exporter does: exponential
	// backoff with jitter until max_elapsed_time, then the batch is dropped
	// (Stats.Dropped). A permanent error drops it at once. Default on, from
	// 50ms doubling to 2s, for at most 5 minutes: an exporter queue that is
	// full for longer is a stall, not backpressure.
	RetryOnFailure configretry.BackOffConfig `mapstructure:"retry_on_failure"`
}

var _ component.Config = (*Config)(nil)

func createDefaultConfig() component.Config {
	return &Config{
		Users:           10,
		EventsPerUser:   1900,
		MetricsFraction: 0.25,
		LogsFraction:    0.30,
		Concurrency:     1,
		Seed:            1,
		BatchSize:       500,
		WarmupPause:     5 * time.Second,
		RetryOnFailure:  defaultRetry(),
	}
}

func defaultRetry() configretry.BackOffConfig {
	rc := configretry.NewDefaultBackOffConfig()
	rc.InitialInterval = 50 * time.Millisecond
	rc.MaxInterval = 2 * time.Second
	rc.MaxElapsedTime = 5 * time.Minute
	return rc
}

// Validate checks every key and joins all problems.
func (cfg *Config) Validate() error {
	var errs []error
	if cfg.Users < 1 || cfg.Users > 1_000_000_000 {
		errs = append(errs, fmt.Errorf(`"users" must be between 1 and 1000000000, got %d`, cfg.Users))
	}
	if cfg.EventsPerUser < 1 || cfg.EventsPerUser > 10_000_000 {
		errs = append(errs, fmt.Errorf(`"events_per_user" must be between 1 and 10000000, got %d`, cfg.EventsPerUser))
	}
	fractionsOK := true
	if !(cfg.MetricsFraction >= 0 && cfg.MetricsFraction <= 1) { // also rejects NaN
		errs = append(errs, fmt.Errorf(`"metrics_fraction" must be between 0 and 1, got %v`, cfg.MetricsFraction))
		fractionsOK = false
	}
	if !(cfg.LogsFraction >= 0 && cfg.LogsFraction <= 1) {
		errs = append(errs, fmt.Errorf(`"logs_fraction" must be between 0 and 1, got %v`, cfg.LogsFraction))
		fractionsOK = false
	}
	if fractionsOK && cfg.MetricsFraction+cfg.LogsFraction >= 1 {
		errs = append(errs, fmt.Errorf(`"metrics_fraction" + "logs_fraction" must be below 1 to leave room for spans, got %v`, cfg.MetricsFraction+cfg.LogsFraction))
		fractionsOK = false
	}
	if fractionsOK && cfg.EventsPerUser >= 1 {
		// Logs and metrics hang off traces, so every user needs one.
		if spans, _, _ := cfg.perUser(); spans < minSpansPerUser {
			errs = append(errs, fmt.Errorf(`"events_per_user" %d leaves %d spans per user after the metrics and logs fractions; at least %d are needed for one trace`, cfg.EventsPerUser, spans, minSpansPerUser))
		}
	}
	if !(cfg.Rate >= 0) || math.IsInf(cfg.Rate, 0) {
		errs = append(errs, fmt.Errorf(`"rate" must be 0 (unlimited) or a positive number of items per second, got %v`, cfg.Rate))
	}
	if cfg.Duration < 0 {
		errs = append(errs, fmt.Errorf(`"duration" must be 0 (until done) or positive, got %s`, cfg.Duration))
	}
	if cfg.Pregenerate && cfg.Duration > 0 {
		// duration bounds the load by time, not by users: the batches
		// prepared past it would never be sent.
		errs = append(errs, fmt.Errorf(`"pregenerate" needs a load bounded by "users"; "duration" must be 0 with it, got %s`, cfg.Duration))
	}
	if cfg.WarmupUsers < 0 || cfg.WarmupUsers > 1_000_000_000 {
		errs = append(errs, fmt.Errorf(`"warmup_users" must be between 0 (none) and 1000000000, got %d`, cfg.WarmupUsers))
	}
	if cfg.WarmupPause < 0 {
		errs = append(errs, fmt.Errorf(`"warmup_pause" must be 0 or positive, got %s`, cfg.WarmupPause))
	}
	if cfg.Concurrency < 1 || cfg.Concurrency > 1024 {
		errs = append(errs, fmt.Errorf(`"concurrency" must be between 1 and 1024, got %d`, cfg.Concurrency))
	}
	if cfg.BatchSize < 1 || cfg.BatchSize > 1_000_000 {
		errs = append(errs, fmt.Errorf(`"batch_size" must be between 1 and 1000000, got %d`, cfg.BatchSize))
	}
	if err := cfg.RetryOnFailure.Validate(); err != nil {
		errs = append(errs, fmt.Errorf(`"retry_on_failure": %w`, err))
	}
	for i, s := range cfg.Signals {
		switch s {
		case signalTraces, signalMetrics, signalLogs:
			if slices.Index(cfg.Signals, s) != i {
				errs = append(errs, fmt.Errorf(`"signals" lists %q twice`, s))
			}
		default:
			errs = append(errs, fmt.Errorf(`"signals" entry %q is not one of traces, metrics, logs`, s))
		}
	}
	return errors.Join(errs...)
}

// perUser splits events_per_user into spans, metric data points and log
// records. Metrics and logs are rounded; spans take the remainder so the
// three always add up to events_per_user.
func (cfg *Config) perUser() (spans, points, logs int) {
	points = int(math.Round(float64(cfg.EventsPerUser) * cfg.MetricsFraction))
	logs = int(math.Round(float64(cfg.EventsPerUser) * cfg.LogsFraction))
	return cfg.EventsPerUser - points - logs, points, logs
}

// wants reports whether signal s is on: listed, or the list is empty.
func (cfg *Config) wants(s string) bool {
	return len(cfg.Signals) == 0 || slices.Contains(cfg.Signals, s)
}
