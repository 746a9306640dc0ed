package postgrescopyexporter

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/exporter/exporterhelper"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// testdataEndpoint is the endpoint of the configs in testdata.
const testdataEndpoint = "postgres://otel@127.0.0.1:5432/telemetry"

// defaultConfig is the factory's default config.
func defaultConfig() *Config { return createDefaultConfig().(*Config) }

// unmarshalled is the default config with raw over it, not validated.
func unmarshalled(t *testing.T, raw map[string]any) *Config {
	t.Helper()
	cfg := defaultConfig()
	require.NoError(t, confmap.NewFromStringMap(raw).Unmarshal(cfg))
	return cfg
}

// loadSection is the default config with section name of cm over it, and
// the error of unmarshalling or else of validating it.
func loadSection(t *testing.T, cm *confmap.Conf, name string) (*Config, error) {
	t.Helper()
	sub, err := cm.Sub(name)
	require.NoError(t, err)
	cfg := defaultConfig()
	if err := sub.Unmarshal(cfg); err != nil {
		return cfg, err
	}
	return cfg, confmap.Validate(cfg)
}

// wantConfig is the default config with testdataEndpoint, changed by edit.
func wantConfig(edit func(c *Config)) *Config {
	c := defaultConfig()
	c.Endpoint = testdataEndpoint
	edit(c)
	return c
}

// wantRedis is wantConfig with Redis as the queue: no sending queue, at
// least 4 connections, and the redis section edit makes of the default.
func wantRedis(edit func(rc *RedisConfig)) *Config {
	return wantConfig(func(c *Config) {
		c.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
		c.MaxConns = 4
		rc := defaultRedisConfig()
		edit(&rc)
		c.Redis = configoptional.Some(rc)
	})
}

func TestConfigStruct(t *testing.T) {
	require.NoError(t, componenttest.CheckConfigStruct(createDefaultConfig()))
}

func TestDefaultConfigRoundTrip(t *testing.T) {
	cfg := defaultConfig()
	require.NoError(t, confmap.New().Unmarshal(cfg))
	assert.Equal(t, createDefaultConfig(), cfg)
	assert.Equal(t, metadata.NewDefaultSendingQueueConfig(), cfg.QueueConfig)
	assert.Equal(t, "otel", cfg.Schema)
	assert.True(t, cfg.CreateSchema)
	// The default is not valid on its own: the endpoint is required.
	assert.ErrorContains(t, cfg.Validate(), `"endpoint" is required`)
}

// TestDefaultQueueIsBoundedInBytes: direct mode's default queue counts
// protobuf bytes, 32 MiB per signal, so that what it holds bounds the
// collector's memory whatever an item weighs (an item count let large spans
// fill gigabytes); batches are still counted in items.
func TestDefaultQueueIsBoundedInBytes(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	require.NoError(t, confmap.NewFromStringMap(map[string]any{"endpoint": "postgres://otel@127.0.0.1:5432/telemetry"}).Unmarshal(cfg))
	require.NoError(t, confmap.Validate(cfg))
	require.True(t, cfg.QueueConfig.HasValue())
	q := cfg.QueueConfig.Get()
	assert.Equal(t, exporterhelper.RequestSizerTypeBytes, q.Sizer)
	assert.EqualValues(t, 32<<20, q.QueueSize)
	assert.True(t, q.WaitForResult)
	assert.True(t, q.BlockOnOverflow)
	assert.Equal(t, exporterhelper.RequestSizerTypeItems, q.Batch.Get().Sizer)
	assert.EqualValues(t, 2000, q.Batch.Get().MinSize)
	assert.EqualValues(t, 5000, q.Batch.Get().MaxSize)

	// Setting the sizer to items with a queue_size in items is valid.
	cfg = createDefaultConfig().(*Config)
	require.NoError(t, confmap.NewFromStringMap(map[string]any{
		"endpoint":      "postgres://otel@127.0.0.1:5432/telemetry",
		"sending_queue": map[string]any{"sizer": "items", "queue_size": 200000},
	}).Unmarshal(cfg))
	require.NoError(t, confmap.Validate(cfg))
}

// TestDefaultRetryNeverGivesUp: with the factory's defaults a retryable
// failure is retried without a time budget (issue 15 item 3: the
// Collector's 300s max_elapsed_time dropped acknowledged data after a
// five-minute outage), also when the user's retry_on_failure section sets
// only other keys.
func TestDefaultRetryNeverGivesUp(t *testing.T) {
	cfg := defaultConfig()
	assert.True(t, cfg.RetryConfig.Enabled, "retry_on_failure is on by default")
	assert.Zero(t, cfg.RetryConfig.MaxElapsedTime, "max_elapsed_time 0: never give up")
	require.NoError(t, cfg.RetryConfig.Validate())

	cfg = unmarshalled(t, map[string]any{
		"endpoint":         testdataEndpoint,
		"retry_on_failure": map[string]any{"initial_interval": "1s"},
	})
	assert.Zero(t, cfg.RetryConfig.MaxElapsedTime)
	assert.Equal(t, time.Second, cfg.RetryConfig.InitialInterval)
	require.NoError(t, confmap.Validate(cfg))
}

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	defaultQueue := metadata.NewDefaultSendingQueueConfig()
	customQueue := exporterhelper.NewDefaultQueueConfig()
	customQueue.NumConsumers = 3
	customQueue.QueueSize = 50000
	customQueue.BlockOnOverflow = true // not in the file: the exporter's default
	customQueue.WaitForResult = true   // not in the file: the exporter's default
	customQueue.Sizer = exporterhelper.RequestSizerTypeItems
	batch := exporterhelper.NewDefaultBatchConfig()
	batch.FlushTimeout = time.Second
	batch.MinSize = 1000
	batch.MaxSize = 10000
	customQueue.Batch = configoptional.Some(batch)

	tls := configtls.NewDefaultClientConfig()
	tls.CAFile = "/etc/ssl/ca.pem"
	tls.ServerName = "db.internal"

	tests := []struct {
		id   component.ID
		want *Config
	}{
		{
			id: component.NewID(metadata.Type),
			want: &Config{
				TimeoutConfig: exporterhelper.TimeoutConfig{Timeout: 30 * time.Second},
				QueueConfig:   defaultQueue,
				MaxConns:      6, // the default queue's 2 consumers × 3 signals
				WorkMem:       "64MB",
				RetryConfig: configretry.BackOffConfig{
					Enabled:             true,
					InitialInterval:     5 * time.Second,
					MaxInterval:         30 * time.Second,
					MaxElapsedTime:      0,
					Multiplier:          1.5,
					RandomizationFactor: 0.5,
				},
				Endpoint:        testdataEndpoint,
				Schema:          "otel",
				CreateSchema:    true,
				Indexes:         true,
				Partitioning:    defaultPartitioningConfig(),
				LedgerRetention: 24 * time.Hour,
				Redis:           configoptional.Default(defaultRedisConfig()),
				PromotePreset:   "genai",
				Pricing:         defaultPricingConfig(),
				CostAttribution: defaultCostAttributionConfig(),
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "custom"),
			want: &Config{
				TimeoutConfig: exporterhelper.TimeoutConfig{Timeout: 10 * time.Second},
				QueueConfig:   configoptional.Some(customQueue),
				RetryConfig: configretry.BackOffConfig{
					Enabled:             true,
					InitialInterval:     time.Second,
					MaxInterval:         10 * time.Second,
					MaxElapsedTime:      0,
					Multiplier:          1.5,
					RandomizationFactor: 0.5,
				},
				Endpoint:        configopaque.String("postgres://otel:s3cret@db.example.com:5433/telemetry?sslmode=require"),
				Password:        "override",
				TLS:             configoptional.Some(tls),
				Schema:          "telemetry",
				CreateSchema:    false,
				MaxConns:        12,
				WorkMem:         "16MB",
				QueryExecMode:   "simple_protocol",
				Indexes:         true,
				Partitioning:    defaultPartitioningConfig(),
				LedgerRetention: 24 * time.Hour,
				Redis:           configoptional.Default(defaultRedisConfig()),
				PromotePreset:   "none",
				Pricing:         defaultPricingConfig(),
				CostAttribution: defaultCostAttributionConfig(),
				Promote: []PromoteConfig{
					{Column: "user_id", Type: "text", From: []string{"span:enduser.id", "log:user.id", "resource:user.id"},
						Signals: []string{"traces", "logs"}, Remove: true},
					{Column: "retries", Type: "bigint", From: []string{"span:http.request.resend_count"}},
				},
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "noqueue"),
			want: &Config{
				TimeoutConfig: exporterhelper.TimeoutConfig{Timeout: 30 * time.Second},
				QueueConfig:   configoptional.None[exporterhelper.QueueBatchConfig](),
				MaxConns:      4, // no queue: at least 4
				WorkMem:       "64MB",
				RetryConfig: func() configretry.BackOffConfig {
					r := defaultRetryConfig()
					r.Enabled = false
					return r
				}(),
				Endpoint:        "host=127.0.0.1 port=5432 user=postgres dbname=postgres",
				Schema:          "otel",
				CreateSchema:    true,
				Indexes:         true,
				Partitioning:    defaultPartitioningConfig(),
				LedgerRetention: 24 * time.Hour,
				Redis:           configoptional.Default(defaultRedisConfig()),
				PromotePreset:   "genai",
				Pricing:         defaultPricingConfig(),
				CostAttribution: defaultCostAttributionConfig(),
			},
		},
		{
			id: component.NewIDWithName(metadata.Type, "redis"),
			want: wantRedis(func(rc *RedisConfig) {
				rc.Endpoint = "redis://:pw@127.0.0.1:6379/2"
				rc.KeyPrefix = "otel-prod"
				rc.Workers = 3
				rc.MaxRows = 5000
				rc.MaxWait = time.Second
				rc.ClaimAfter = 30 * time.Second
				rc.MaxPendingBytes = 1 << 30
				rc.Compression = compressionNone
			}),
		},
		{
			// Redis alone starts: Redis is the queue.
			id:   component.NewIDWithName(metadata.Type, "redis_alone"),
			want: wantRedis(func(rc *RedisConfig) { rc.Endpoint = "127.0.0.1:6379" }),
		},
		{
			id: component.NewIDWithName(metadata.Type, "redis_sentinel"),
			want: wantRedis(func(rc *RedisConfig) {
				rc.Sentinel = configoptional.Some(RedisSentinelConfig{
					MasterName: "otel", Endpoints: []string{"sentinel-0:26379", "sentinel-1:26379"},
					Username: "watcher", Password: "sentinel-pw",
				})
				rc.Password = "data-pw"
				rc.MinReplicas = 1
				rc.RequireDurability = "replicated"
			}),
		},
		{
			id: component.NewIDWithName(metadata.Type, "redis_cluster"),
			want: wantRedis(func(rc *RedisConfig) {
				rc.Cluster = configoptional.Some(RedisClusterConfig{Endpoints: []string{"redis-0:6379", "redis-1:6379"}})
				rc.Shards = 6
			}),
		},
		{
			// A queue the user wrote, waiting for the result, stays.
			id: component.NewIDWithName(metadata.Type, "redis_queue"),
			want: wantConfig(func(c *Config) {
				c.QueueConfig.Get().WaitForResult = true
				rc := defaultRedisConfig()
				rc.Endpoint = "127.0.0.1:6379"
				c.Redis = configoptional.Some(rc)
			}),
		},
		{
			// The default batch (2,000 to 5,000 items) shrinks to the queue.
			id: component.NewIDWithName(metadata.Type, "small_queue"),
			want: wantConfig(func(c *Config) {
				q := c.QueueConfig.Get()
				q.Sizer = exporterhelper.RequestSizerTypeItems
				q.QueueSize = 1000
				q.Batch.Get().MinSize = 500
				q.Batch.Get().MaxSize = 1000
			}),
		},
		{
			// A max_size the user set is kept; min_size fits under both.
			id: component.NewIDWithName(metadata.Type, "small_queue_max"),
			want: wantConfig(func(c *Config) {
				q := c.QueueConfig.Get()
				q.Sizer = exporterhelper.RequestSizerTypeItems
				q.QueueSize = 1000
				q.Batch.Get().MinSize = 300
				q.Batch.Get().MaxSize = 300
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg, err := loadSection(t, cm, tt.id.String())
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg)
		})
	}
}

func TestInvalidConfigs(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "invalid_configs.yaml"))
	require.NoError(t, err)
	want := map[string]string{
		"missing_endpoint":            `"endpoint" is required`,
		"malformed_endpoint":          `"endpoint" is not a valid PostgreSQL URL`,
		"bad_schema":                  `"schema" "bad-name;drop" is not a valid identifier`,
		"empty_schema":                `"schema" "" is not a valid identifier`,
		"negative_max_conns":          `"max_conns" must be 0`,
		"unknown_key":                 `invalid keys: batch_rows`,
		"negative_timeout":            `timeout`,
		"redis_no_endpoint":           `redis: one of "endpoint", "sentinel" or "cluster" is required`,
		"redis_endpoint_and_sentinel": `redis: set only one of "endpoint", "sentinel" and "cluster"`,
		"redis_sentinel_no_master":    `redis: "sentinel::master_name" is required`,
		"redis_sentinel_bad_endpoint": `redis: "sentinel::endpoints"[1] must be host:port, got "sentinel-2"`,
		"redis_cluster_no_endpoints":  `redis: "cluster::endpoints" needs at least one host:port`,
		"redis_cluster_db":            `redis: "db" must be 0 with "cluster"`,
		"redis_bad_shards":            `redis: "shards" must be in 1..256, got 0`,
		"redis_bad_endpoint":          `redis: "endpoint" must be host:port`,
		"redis_bad_workers":           `redis: "workers" must be in 1..64, got 0`,
		"redis_bad_prefix":            `redis: "key_prefix"`,
		"redis_bad_compression":       `redis: "compression" must be "s2" or "none", got "zstd"`,
		"redis_bad_min_replicas":      `redis: "min_replicas" must be 0 or positive, got -1`,
		"redis_replicated_alone":      `redis: "require_durability" "replicated" needs "min_replicas" of at least 1`,
		"redis_bad_durability":        `redis: "require_durability" must be one of "none", "aof_everysec", "aof_always", "replicated", got "fsync"`,
		"redis_short_ledger":          `"ledger_retention" (24h0m0s) must be at least 10 × redis::claim_after`,
		"partitioning_bad_premake":    `partitioning: "premake" must be in 1..366, got 0`,
		"short_ledger":                `"ledger_retention" must be at least 1m`,
		"redis_early_ack":             `set "sending_queue::enabled: false"`,
		"small_queue_explicit_min":    "`min_size` must be less than or equal to `queue_size`",
		"items_size_in_bytes_queue":   `"sending_queue::queue_size" is 200000 bytes (sizer: bytes, the default): a bytes-sized queue needs at least 1048576 (1 MiB); for a queue counted in items set "sending_queue::sizer: items"`,
		"bad_exec_mode":               `"query_exec_mode" "prepared" is not one of`,
		"bad_work_mem_unit":           `"work_mem" "64mb" is not a PostgreSQL memory size`,
		"bad_work_mem_sql":            `"work_mem" "64MB'; DROP TABLE x; --" is not a PostgreSQL memory size`,
		"bad_distribution":            `"distribution" must be empty or "citus"`,
		"promote_bad_column":          `column "user-id" is not a valid identifier`,
		"promote_builtin_column":      `collides with a built-in column of spans`,
		"promote_bad_type":            `type "integer" is not one of text, bigint`,
		"promote_no_keys":             `"from" needs at least one key`,
		"promote_bad_scope":           `from "scope:user.id" is not "span:<key>"`,
		"promote_no_key_name":         `from "span:" is not "span:<key>"`,
		"promote_scope_signal":        `from "log:user.id" reads logs, but "signals" lacks logs`,
		"promote_bad_signal":          `signal "metrics" is not traces or logs`,
		"promote_twice":               `promoted column "user_id": named twice`,
		"promote_bad_preset":          `"promote_preset" must be "genai" or "none", got "openai"`,
		"promote_not_a_list":          `'promote' source data must be an array or slice`,
	}
	// Every entry of the file has an expectation, and every expectation an entry.
	entries := make([]string, 0, len(want))
	for k := range cm.ToStringMap() {
		entries = append(entries, k)
	}
	require.ElementsMatch(t, entries, slices.Collect(maps.Keys(want)))
	for name, msg := range want {
		t.Run(name, func(t *testing.T) {
			_, err := loadSection(t, cm, name)
			require.Error(t, err)
			assert.Contains(t, err.Error(), msg)
		})
	}
}

func TestMalformedEndpointErrorHidesPassword(t *testing.T) {
	cfg := defaultConfig()
	for _, endpoint := range []string{
		"postgres://u:hunter2@host:notaport/db",
		// pgconn's own masking leaves the part after a raw '@' visible.
		"postgres://u:hunt@er2@host:notaport/db",
	} {
		cfg.Endpoint = configopaque.String(endpoint)
		err := cfg.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), `"endpoint" is not a valid PostgreSQL URL`)
		assert.NotContains(t, err.Error(), "hunt")
		assert.NotContains(t, err.Error(), "er2")
	}
}

// TestPromoteReplacesPresetColumn: a promote entry named like a preset column
// takes its place (same position, the user's keys), not a second column.
func TestPromoteReplacesPresetColumn(t *testing.T) {
	cfg := defaultConfig()
	cfg.Promote = []PromoteConfig{{Column: "gen_ai_cost_usd", Type: "double precision", From: []string{"span:acme.cost"}}}
	cols, err := cfg.promotedColumns()
	require.NoError(t, err)
	require.Len(t, cols, len(tables.GenAI()), "replaced, not added")
	for _, c := range cols {
		if c.Column == "gen_ai_cost_usd" {
			assert.Equal(t, []tables.Source{{Scope: tables.ScopeSpan, Key: "acme.cost"}}, c.From)
		}
	}
	cfg.PromotePreset = presetNone
	cols, err = cfg.promotedColumns()
	require.NoError(t, err)
	assert.Len(t, cols, 1, "without the preset only the entry remains")
}

// max_conns shows its real default (print-config prints it): the sending
// queue's num_consumers × 3 signals, at least 4, from the queue the config
// ends up with; a value the user wrote is kept.
func TestMaxConnsDefaultIsConcrete(t *testing.T) {
	assert.EqualValues(t, 6, defaultConfig().MaxConns, "2 consumers × 3 signals")
	for _, tc := range []struct {
		name string
		raw  map[string]any
		want int32
	}{
		{"more consumers", map[string]any{"sending_queue": map[string]any{"num_consumers": 20}}, 60},
		{"redis, no queue", map[string]any{"redis": map[string]any{"endpoint": "127.0.0.1:6379"}}, 4},
		{"written", map[string]any{"max_conns": 9, "sending_queue": map[string]any{"num_consumers": 20}}, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.raw["endpoint"] = "postgres://otel@127.0.0.1/db"
			cfg := unmarshalled(t, tc.raw)
			assert.Equal(t, tc.want, cfg.MaxConns)
		})
	}
}

// An in-memory queue acknowledges once committed by default; a persistent
// queue acknowledges once it holds the request (the Collector refuses
// wait_for_result next to storage), unless the user asks otherwise, which
// Validate then refuses by its key.
func TestWaitForResultFollowsTheQueue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		queue   map[string]any
		want    bool
		invalid string
	}{
		{"in memory", map[string]any{}, true, ""},
		{"in memory, acknowledging early", map[string]any{"wait_for_result": false}, false, ""},
		{"storage", map[string]any{"storage": "file_storage"}, false, ""},
		{"storage, waiting", map[string]any{"storage": "file_storage", "wait_for_result": true}, true, "wait_for_result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := unmarshalled(t, map[string]any{"endpoint": "postgres://otel@127.0.0.1/db", "sending_queue": tc.queue})
			assert.Equal(t, tc.want, cfg.QueueConfig.Get().WaitForResult)
			err := confmap.Validate(cfg)
			if tc.invalid == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.invalid)
			}
		})
	}
}
