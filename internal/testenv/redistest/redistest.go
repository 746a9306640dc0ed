// Package redistest gives tests the Redis named by POSTGRESCOPY_TEST_REDIS
// (default: the local one on 127.0.0.1:6379): host:port, or a redis:// or
// rediss:// URL with a user name, a password and a database, as
// scripts/services.sh accepts it; and throwaway servers of the test's own
// (servers.go), which a test may kill, restart or reconfigure.
package redistest // import "github.com/postgrescopy/postgrescopy/internal/testenv/redistest"

import (
	"net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DefaultEndpoint is used when POSTGRESCOPY_TEST_REDIS is not set.
const DefaultEndpoint = "127.0.0.1:6379"

// Endpoint is the test Redis as the exporter's redis::endpoint takes it.
func Endpoint() string {
	if e := os.Getenv("POSTGRESCOPY_TEST_REDIS"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Options are the client options of the test Redis. A URL that does not
// parse falls back to being an address, which the client then fails to
// reach with an error that Redacted names.
func Options() *redis.Options {
	e := Endpoint()
	if strings.Contains(e, "://") {
		if o, err := redis.ParseURL(e); err == nil {
			return o
		}
	}
	return &redis.Options{Addr: e}
}

// Addr is the test Redis's host:port.
func Addr() string { return Options().Addr }

// Redacted is the endpoint for messages: a URL's password replaced.
func Redacted() string {
	e := Endpoint()
	u, err := url.Parse(e)
	if err != nil || u.User == nil {
		if strings.Contains(e, "@") {
			return "(a Redis URL that does not parse)"
		}
		return e
	}
	return u.Redacted()
}
