package main

import (
	"context"
	"os"
	"strings"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgbouncer"
)

// pgbouncerURL starts the pooled strategy's pgbouncer (transaction mode, as
// in the article) on first use and returns a URL through it.
func (b *bench) pgbouncerURL(ctx context.Context) (string, error) {
	if b.bouncer == nil && b.bouncerErr == nil {
		dir, err := os.MkdirTemp(b.tmp, "pgbouncer-")
		if err != nil {
			b.bouncerErr = err
		} else {
			b.bouncer, b.bouncerErr = pgbouncer.Start(ctx, pgbouncer.Options{
				Upstream: b.url, Database: "bench", PoolSize: b.bouncerPool, Dir: dir, Logf: b.logf,
			})
		}
	}
	if b.bouncerErr != nil {
		return "", b.bouncerErr
	}
	return b.bouncer.URL, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
