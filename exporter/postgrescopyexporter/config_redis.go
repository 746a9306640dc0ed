package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/postgrescopy/postgrescopy/internal/coord"
)

// RedisConfig turns on Redis coordination: Consume hands each request to a
// Redis stream, and flush workers on every replica batch the streams into
// PostgreSQL. Absent, the exporter writes directly.
type RedisConfig struct {
	// endpoint is host:port, or a redis:// or rediss:// URL (which may carry
	// user, password and db), of a single Redis or of a managed service's
	// primary endpoint. Opaque. Exactly one of endpoint, sentinel and
	// cluster is required.
	Endpoint configopaque.String `mapstructure:"endpoint"`
	// sentinel finds the primary through Redis Sentinel, and follows it
	// through a failover.
	Sentinel configoptional.Optional[RedisSentinelConfig] `mapstructure:"sentinel"`
	// cluster talks to a Redis Cluster from its seed nodes.
	Cluster configoptional.Optional[RedisClusterConfig] `mapstructure:"cluster"`
	// shards spreads each signal over this many streams, each with its own
	// hash tag (its own Redis Cluster slot). Default 1: one node gains
	// nothing from more. Range 1..256.
	Shards int `mapstructure:"shards"`
	// username for Redis ACLs of the data nodes. Default empty.
	Username string `mapstructure:"username"`
	// password overrides the URL's. Default empty.
	Password configopaque.String `mapstructure:"password"`
	// db is the logical database (not available on Redis Cluster). Default 0.
	DB int `mapstructure:"db"`
	// tls, when present, connects with TLS using the Collector's TLS client
	// settings. Default absent (a rediss:// URL also turns TLS on).
	TLS configoptional.Optional[configtls.ClientConfig] `mapstructure:"tls"`
	// key_prefix starts every key; replicas that share it share the work.
	// Default "postgrescopy".
	KeyPrefix string `mapstructure:"key_prefix"`
	// consumer names this replica in the consumer group. Default: host name,
	// process id and a random suffix, so a restarted replica is a new consumer
	// and its predecessor's pending entries are claimed like any dead one's.
	Consumer string `mapstructure:"consumer"`
	// workers is the number of flush workers per signal on this replica, each
	// with its own PostgreSQL transaction. Default 2, range 1..64.
	Workers int `mapstructure:"workers"`
	// max_rows flushes a batch once it holds this many items. Default 3000:
	// as fast as 5000 or more for a sustained load (measured), and a burst's
	// last flushes are smaller, so its tail is not one long COPY on one core.
	MaxRows int `mapstructure:"max_rows"`
	// max_bytes flushes a batch once its encoded rows (decompressed, as
	// they are sent to PostgreSQL) reach this size. Default 6 MiB: what a
	// row costs PostgreSQL follows its bytes (a span is about four log
	// records in both), so spans flush in smaller batches than logs and
	// metrics, and a burst's last span flush is not the one write left.
	MaxBytes int64 `mapstructure:"max_bytes"`
	// max_wait flushes a batch this long after its first entry, or once no new
	// entry came for a tenth of it (the stream is drained). Default 500ms.
	MaxWait time.Duration `mapstructure:"max_wait"`
	// claim_after is how long an entry may stay pending on a consumer before
	// another replica takes it over. It must exceed the longest flush.
	// Default 60s, at least 1s.
	ClaimAfter time.Duration `mapstructure:"claim_after"`
	// max_pending_bytes bounds the payload bytes one signal's stream may hold;
	// beyond it Consume returns a retryable error (backpressure) and nothing is
	// trimmed. Default 512 MiB; 0 means no bound.
	MaxPendingBytes int64 `mapstructure:"max_pending_bytes"`
	// max_pending_entries bounds the entries of one stream likewise. Default 0
	// (no bound).
	MaxPendingEntries int64 `mapstructure:"max_pending_entries"`
	// compression of stream entries: "s2" (default) or "none". Encoded rows
	// shrink 8 to 30 times: Redis holds that much more within
	// max_pending_bytes, and every byte not sent costs Redis, the network and
	// the collector less.
	Compression string `mapstructure:"compression"`
	// require_durability is the least durability the Redis must offer, as
	// read from INFO persistence and CONFIG GET at start: "none" (default,
	// also ""), "aof_everysec" (AOF fsynced at least every second) or
	// "aof_always" (AOF fsynced before every reply) or "replicated" (needs
	// min_replicas, and that many replicas connected). Below it the collector
	// refuses to start: in Redis mode Redis holds the only copy of an
	// acknowledged request until its rows are committed.
	RequireDurability string `mapstructure:"require_durability"`
	// min_replicas is how many replicas must hold an entry (Redis WAIT)
	// before its request is acknowledged; fewer within replica_timeout is a
	// retryable error. The entry stays on the primary and is written unless
	// a failover drops it: retry_on_failure resends it under the same ledger
	// key (written once), a client resending after the error may duplicate it.
	// Replication is asynchronous without it: a failover can drop what the
	// primary acknowledged. Default 0 (no wait).
	MinReplicas int `mapstructure:"min_replicas"`
	// replica_timeout bounds the wait for min_replicas. Default 1s.
	ReplicaTimeout time.Duration `mapstructure:"replica_timeout"`
}

// RedisSentinelConfig names the Sentinel-monitored primary.
type RedisSentinelConfig struct {
	// master_name is the name the sentinels monitor the primary under.
	MasterName string `mapstructure:"master_name"`
	// endpoints are the sentinels' host:port.
	Endpoints []string `mapstructure:"endpoints"`
	// username and password for the sentinels' ACL (requirepass or a user
	// of the sentinels); the data nodes use redis::username and
	// redis::password.
	Username string              `mapstructure:"username"`
	Password configopaque.String `mapstructure:"password"`
}

// RedisClusterConfig names a Redis Cluster's seed nodes.
type RedisClusterConfig struct {
	// endpoints are host:port of some of the cluster's nodes (or a managed
	// service's configuration endpoint); the rest are discovered.
	Endpoints []string `mapstructure:"endpoints"`
}

// maxShards bounds redis::shards: every shard costs each replica
// redis::workers blocked readers per signal.
const maxShards = 256

// requireDurabilityLevels are redis::require_durability's values.
var requireDurabilityLevels = map[string]coord.Durability{
	"":             coord.DurabilityUnknown,
	"none":         coord.DurabilityUnknown,
	"aof_everysec": coord.DurabilityEverySec,
	"aof_always":   coord.DurabilityAlways,
	"replicated":   coord.DurabilityReplicated,
}

// Entry compressions.
const (
	compressionS2   = "s2"
	compressionNone = "none"
)

func defaultRedisConfig() RedisConfig {
	return RedisConfig{
		KeyPrefix:       "postgrescopy",
		Workers:         2,
		MaxRows:         3_000,
		MaxBytes:        6 << 20,
		MaxWait:         500 * time.Millisecond,
		ClaimAfter:      60 * time.Second,
		MaxPendingBytes: 512 << 20,
		Compression:     compressionS2,
		ReplicaTimeout:  time.Second,
		Shards:          1,
	}
}

// Validate checks the redis section.
func (rc *RedisConfig) Validate() error {
	var errs error
	modes := 0
	for _, set := range []bool{rc.Endpoint != "", rc.Sentinel.HasValue(), rc.Cluster.HasValue()} {
		if set {
			modes++
		}
	}
	switch {
	case modes == 0:
		errs = errors.Join(errs, errors.New(`one of "endpoint", "sentinel" or "cluster" is required when the redis section is present`))
	case modes > 1:
		errs = errors.Join(errs, errors.New(`set only one of "endpoint", "sentinel" and "cluster": they are three ways to reach Redis`))
	case rc.Endpoint != "":
		if _, err := rc.options(); err != nil {
			errs = errors.Join(errs, err)
		}
	case rc.Sentinel.HasValue():
		sc := rc.Sentinel.Get()
		if sc.MasterName == "" {
			errs = errors.Join(errs, errors.New(`"sentinel::master_name" is required: the name the sentinels monitor the primary under`))
		}
		errs = errors.Join(errs, checkHostPorts("sentinel::endpoints", sc.Endpoints))
	case rc.Cluster.HasValue():
		errs = errors.Join(errs, checkHostPorts("cluster::endpoints", rc.Cluster.Get().Endpoints))
		if rc.DB != 0 {
			errs = errors.Join(errs, fmt.Errorf(`"db" must be 0 with "cluster": a Redis Cluster has database 0 only, got %d`, rc.DB))
		}
	}
	if rc.Shards < 1 || rc.Shards > maxShards {
		errs = errors.Join(errs, fmt.Errorf(`"shards" must be in 1..%d, got %d`, maxShards, rc.Shards))
	}
	if rc.KeyPrefix == "" || strings.ContainsAny(rc.KeyPrefix, "{} \t\n") {
		errs = errors.Join(errs, fmt.Errorf(`"key_prefix" %q must be non-empty without braces or spaces`, rc.KeyPrefix))
	}
	if rc.Workers < 1 || rc.Workers > 64 {
		errs = errors.Join(errs, fmt.Errorf(`"workers" must be in 1..64, got %d`, rc.Workers))
	}
	if rc.Compression != compressionS2 && rc.Compression != compressionNone {
		errs = errors.Join(errs, fmt.Errorf(`"compression" must be "s2" or "none", got %q`, rc.Compression))
	}
	if _, ok := requireDurabilityLevels[rc.RequireDurability]; !ok {
		errs = errors.Join(errs, fmt.Errorf(`"require_durability" must be one of "none", "aof_everysec", "aof_always", "replicated", got %q`, rc.RequireDurability))
	}
	if rc.MinReplicas < 0 {
		errs = errors.Join(errs, fmt.Errorf(`"min_replicas" must be 0 or positive, got %d`, rc.MinReplicas))
	}
	if rc.RequireDurability == "replicated" && rc.MinReplicas < 1 {
		errs = errors.Join(errs, errors.New(`"require_durability" "replicated" needs "min_replicas" of at least 1`))
	}
	if rc.MinReplicas > 0 && rc.ReplicaTimeout <= 0 {
		errs = errors.Join(errs, fmt.Errorf(`"replica_timeout" must be positive with "min_replicas", got %s`, rc.ReplicaTimeout))
	}
	if rc.MaxRows < 1 {
		errs = errors.Join(errs, fmt.Errorf(`"max_rows" must be positive, got %d`, rc.MaxRows))
	}
	if rc.MaxBytes < 1 {
		errs = errors.Join(errs, fmt.Errorf(`"max_bytes" must be positive, got %d`, rc.MaxBytes))
	}
	if rc.MaxWait <= 0 {
		errs = errors.Join(errs, fmt.Errorf(`"max_wait" must be positive, got %s`, rc.MaxWait))
	}
	if rc.ClaimAfter < time.Second {
		errs = errors.Join(errs, fmt.Errorf(`"claim_after" must be at least 1s, got %s`, rc.ClaimAfter))
	}
	if rc.MaxPendingBytes < 0 || rc.MaxPendingEntries < 0 {
		errs = errors.Join(errs, errors.New(`"max_pending_bytes" and "max_pending_entries" must be 0 (no bound) or positive`))
	}
	return errs
}

// checkHostPorts checks a non-empty list of host:port.
func checkHostPorts(key string, eps []string) error {
	if len(eps) == 0 {
		return fmt.Errorf("%q needs at least one host:port", key)
	}
	for i, ep := range eps {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return fmt.Errorf("%q[%d] must be host:port, got %q", key, i, ep)
		}
	}
	return nil
}

// redisUserinfoByte is what net/url accepts unencoded in user information.
func redisUserinfoByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("-._:~!$&'()*+,;=%@", c) >= 0
}

// clientOptions are the go-redis options of the configured Redis, with the
// tls section's TLS and the data nodes' credentials in every mode; coord
// adds the deadlines and the pool size.
func (rc *RedisConfig) clientOptions(ctx context.Context) (coord.Options, error) {
	opt := &redis.Options{Username: rc.Username, Password: string(rc.Password), DB: rc.DB}
	if rc.Endpoint != "" {
		var err error
		if opt, err = rc.options(); err != nil {
			return coord.Options{}, err
		}
	}
	if rc.TLS.HasValue() {
		tlsCfg, err := rc.TLS.Get().LoadTLSConfig(ctx)
		if err != nil {
			return coord.Options{}, fmt.Errorf(`"redis::tls": %w`, err)
		}
		opt.TLSConfig = tlsCfg
	}
	switch {
	case rc.Sentinel.HasValue():
		sc := rc.Sentinel.Get()
		return coord.Options{Sentinel: &redis.FailoverOptions{
			MasterName: sc.MasterName, SentinelAddrs: sc.Endpoints,
			SentinelUsername: sc.Username, SentinelPassword: string(sc.Password),
			Username: opt.Username, Password: opt.Password, DB: opt.DB, TLSConfig: opt.TLSConfig,
		}}, nil
	case rc.Cluster.HasValue():
		return coord.Options{Cluster: &redis.ClusterOptions{
			Addrs: rc.Cluster.Get().Endpoints, Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig,
		}}, nil
	}
	return coord.Options{Node: opt}, nil
}

// options builds the go-redis options (TLS from the tls section is applied
// at start, where a context is available).
func (rc *RedisConfig) options() (*redis.Options, error) {
	ep := string(rc.Endpoint)
	var opt *redis.Options
	if rest, ok := cutURLScheme(ep, "redis://", "rediss://"); ok {
		// net/url's rule: the authority ends at the first '/', '?' or '#'.
		end := strings.IndexAny(rest, "/?#")
		if end < 0 {
			end = len(rest)
		}
		if err := checkUserinfo(`"endpoint" is not a valid redis:// URL`, rest[:end], rest[end:], redisUserinfoByte); err != nil {
			return nil, err
		}
		u, err := url.Parse(ep)
		if err != nil {
			// url.Error quotes the URL and its reason the text it stopped at.
			return nil, errors.New(`"endpoint" is not a valid redis:// URL: percent-encode reserved characters in the user name and password, or put the password in "password"`)
		}
		if opt, err = redis.ParseURL(ep); err != nil {
			// Its reasons name the scheme, path or a query setting; the
			// password, in the user information, is cut out to be sure.
			msg := err.Error()
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "[REDACTED]")
			}
			return nil, fmt.Errorf(`"endpoint" is not a valid redis:// URL: %s`, msg)
		}
	} else if strings.Contains(ep, "://") {
		// unix:// and anything else go-redis knows; its errors may quote the URL.
		var err error
		if opt, err = redis.ParseURL(ep); err != nil {
			return nil, errors.New(`"endpoint" must be host:port or a redis://, rediss:// or unix:// URL (with reserved characters of the password percent-encoded)`)
		}
	} else {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			// The error quotes the endpoint, which is opaque.
			return nil, errors.New(`"endpoint" must be host:port or a redis:// URL`)
		}
		opt = &redis.Options{Addr: ep}
	}
	if rc.Username != "" {
		opt.Username = rc.Username
	}
	if rc.Password != "" {
		opt.Password = string(rc.Password)
	}
	if rc.DB != 0 {
		opt.DB = rc.DB
	}
	return opt, nil
}
