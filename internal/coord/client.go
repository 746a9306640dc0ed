package coord

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Timeout bounds every socket read and write to Redis (a blocking read gets
// its block time on top, go-redis adds 10s to it): a half-open connection
// fails the call instead of stopping a worker.
const Timeout = 5 * time.Second

// Options is the Redis to talk to, in go-redis's own options types: exactly
// one of Node, Sentinel and Cluster is set.
type Options struct {
	Node     *redis.Options
	Sentinel *redis.FailoverOptions
	Cluster  *redis.ClusterOptions
}

// Client is the client of the configured Redis: a single node, a
// Sentinel-monitored primary or a Redis Cluster; where names it in messages.
type Client struct {
	rdb   redis.UniversalClient
	where string
	// user and secrets are the data nodes' user and the passwords that no
	// message may show.
	user    string
	secrets []string
	// masterName and sentinels name the Sentinel setup (Sentinel mode only).
	masterName, sentinels string
	// sentinelClients are clients of each sentinel, with the failover
	// client's own options: the maintenance checks and the guard of the
	// failover client's new connections ask them (Sentinel mode only).
	sentinelClients []*redis.SentinelClient
}

// NewClient builds the client of o. Every mode gets the same deadlines
// (Timeout unless o sets its own), context cancellation and a pool of at
// least poolSize connections.
func NewClient(o Options, poolSize int) (*Client, error) {
	timeouts := func(read, write *time.Duration, pool *int, cancel *bool) {
		// Cancelling a context must abort a blocked XREADGROUP at shutdown.
		*cancel = true
		// Every call is timed, whatever the URL asked: without a read
		// deadline a half-open connection would hold a flush worker until
		// shutdown.
		if *read <= 0 {
			*read = Timeout
		}
		if *write <= 0 {
			*write = Timeout
		}
		*pool = max(*pool, poolSize)
	}
	cl := &Client{}
	switch {
	case o.Sentinel != nil:
		so := *o.Sentinel
		timeouts(&so.ReadTimeout, &so.WriteTimeout, &so.PoolSize, &so.ContextTimeoutEnabled)
		cl.user, cl.secrets = so.Username, []string{so.Password, so.SentinelPassword}
		cl.masterName, cl.sentinels = so.MasterName, strings.Join(so.SentinelAddrs, ",")
		cl.where = fmt.Sprintf("redis::sentinel master %q (sentinels %s)", so.MasterName, cl.sentinels)
		for _, addr := range so.SentinelAddrs {
			cl.sentinelClients = append(cl.sentinelClients, redis.NewSentinelClient(&redis.Options{
				Addr: addr, ClientName: so.ClientName, Dialer: so.Dialer,
				Username: so.SentinelUsername, Password: so.SentinelPassword, TLSConfig: so.TLSConfig,
				DialTimeout: so.DialTimeout, ReadTimeout: so.ReadTimeout, WriteTimeout: so.WriteTimeout,
				ContextTimeoutEnabled: true,
				// Asked once per maintenance tick and per new connection of
				// the failover client: an unanswered sentinel counts as not
				// naming the server, no retry needed.
				MaxRetries: -1, PoolSize: 1,
			}))
		}
		guard := &namedPrimaryGuard{master: so.MasterName, sentinels: cl.sentinelClients}
		own := so.OnConnect
		so.OnConnect = func(ctx context.Context, cn *redis.Conn) error {
			if own != nil {
				if err := own(ctx, cn); err != nil {
					return err
				}
			}
			return guard.onConnect(ctx, cn)
		}
		cl.rdb = redis.NewFailoverClient(&so)
	case o.Cluster != nil:
		co := *o.Cluster
		timeouts(&co.ReadTimeout, &co.WriteTimeout, &co.PoolSize, &co.ContextTimeoutEnabled)
		cl.user, cl.secrets = co.Username, []string{co.Password}
		cl.where = "redis::cluster " + strings.Join(co.Addrs, ",")
		cl.rdb = redis.NewClusterClient(&co)
	case o.Node != nil:
		no := *o.Node
		timeouts(&no.ReadTimeout, &no.WriteTimeout, &no.PoolSize, &no.ContextTimeoutEnabled)
		cl.user, cl.secrets = no.Username, []string{no.Password}
		cl.where = "redis::endpoint " + no.Addr
		cl.rdb = redis.NewClient(&no)
	default:
		return nil, fmt.Errorf("postgrescopy: no Redis endpoint, sentinel or cluster")
	}
	if cl.user == "" {
		cl.user = "default"
	}
	return cl, nil
}

// Where names the Redis in logs and errors (the config key and address).
func (cl *Client) Where() string { return cl.where }

// Close closes the client's connections.
func (cl *Client) Close() error {
	for _, sc := range cl.sentinelClients {
		_ = sc.Close()
	}
	return cl.rdb.Close()
}

// explain names a Redis error for what it is and says what fixes it, for
// clients' statuses and the logs; mem, when known, is the memory settings
// of the server that refused (an OOM). The error stays retryable and
// wrapped: Classify still sees it.
func (cl *Client) explain(err error, mem ...Memory) error {
	switch Classify(err) {
	case KindUnknownMaster:
		return fmt.Errorf("sentinel does not know master_name %q: check redis::sentinel::master_name against "+
			"their sentinel monitor lines, or let them start monitoring it; retrying: %w", cl.masterName, err)
	case KindNoSentinel:
		return fmt.Errorf("no sentinel of redis::sentinel::endpoints (%s) names a primary for %q; retrying: %w", cl.sentinels, cl.masterName, err)
	case KindClusterDown:
		return fmt.Errorf("the Redis Cluster does not serve the slot (CLUSTERDOWN: a primary down and no replica promoted yet, "+
			"or slots not assigned); retrying: %w", err)
	case KindOOM:
		if len(mem) == 0 || mem[0].Policy == "" {
			return fmt.Errorf("Redis is out of memory (at maxmemory): raise maxmemory or let the flush catch up; retrying: %w", err)
		}
		m := mem[0]
		where := ""
		if m.Addr != "" {
			where = " on " + m.Addr
		}
		return fmt.Errorf("Redis is out of memory%s (maxmemory %d bytes, policy %s): raise maxmemory or let the flush catch up; retrying: %w",
			where, m.MaxBytes, m.Policy, err)
	}
	return err
}

// redact hides the configured passwords in err.
func (cl *Client) redact(err error) error {
	for _, s := range cl.secrets {
		err = redactErr(err, s)
	}
	return err
}

// redisLogger receives go-redis's own log lines (a failed dial, a bad
// connection put back), at debug level: go-redis repeats them at every
// attempt, and the exporter's own lines say what fails, once per change.
// go-redis has one process-wide logger: the exporter started last receives
// the lines of every client.
var (
	redisLogger    atomic.Pointer[zap.Logger]
	redisLoggerSet sync.Once
)

type zapRedisLogger struct{}

func (zapRedisLogger) Printf(_ context.Context, format string, v ...any) {
	if l := redisLogger.Load(); l != nil {
		if l.Core().Enabled(zap.DebugLevel) {
			l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
		}
	}
}

// routeRedisLogs sends go-redis's log lines to logger instead of stderr.
func routeRedisLogs(logger *zap.Logger) {
	redisLogger.Store(logger.With(zap.String("source", "go-redis")))
	redisLoggerSet.Do(func() { redis.SetLogger(zapRedisLogger{}) })
}

// redactedError hides a secret that an error message might hold (no Redis
// reply is known to echo the password; this makes sure).
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

func redactErr(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &redactedError{msg: strings.ReplaceAll(err.Error(), secret, "[REDACTED]"), err: err}
}
