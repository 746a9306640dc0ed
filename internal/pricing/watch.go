package pricing

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Catalog keeps the catalog's file rows equal to the price file: LoadNow
// reads and loads it, Watch reloads it whenever its content changes.
type Catalog struct {
	Pool   *pgxpool.Pool
	Schema string
	File   string
	Logger *zap.Logger

	loaded [sha256.Size]byte // content last loaded
	ok     bool
}

// LoadNow reads the file and loads it unless its content is what was last
// loaded. It reports whether it loaded. A malformed file loads nothing: the
// catalog keeps its previous prices.
func (c *Catalog) LoadNow(ctx context.Context) (bool, error) {
	b, err := os.ReadFile(c.File)
	if err != nil {
		return false, fmt.Errorf("read price file: %w", err)
	}
	sum := sha256.Sum256(b)
	if c.ok && bytes.Equal(sum[:], c.loaded[:]) {
		return false, nil
	}
	prices, err := Parse(b)
	if err != nil {
		return false, fmt.Errorf("price file %s: %w", c.File, err)
	}
	if err := Load(ctx, c.Pool, c.Schema, c.File, prices); err != nil {
		return false, err
	}
	c.loaded, c.ok = sum, true
	return true, nil
}

// Watch polls the file every interval until ctx ends, reloading it when it
// changes and ready says the database is; a failed reload is logged and
// retried at the next poll.
func (c *Catalog) Watch(ctx context.Context, interval time.Duration, ready func() bool) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var failing string
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !ready() {
			continue
		}
		loaded, err := c.LoadNow(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			// Once per distinct failure, not every poll.
			if err.Error() != failing {
				failing = err.Error()
				c.Logger.Error("price file not reloaded; the catalog keeps its previous prices", zap.Error(err))
			}
		case loaded:
			failing = ""
			c.Logger.Info("price file reloaded", zap.String("file", c.File))
		}
	}
}
