package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"

	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/pricing"
)

// prepareAISpend runs in prepare, after the promoted columns exist and
// before the first maintenance: the cost view gets the configured
// dimensions (owner only: create_schema) and the catalog the price file, so
// that the first rollup prices with them.
func (c *client) prepareAISpend(ctx context.Context) error {
	if c.cfg.CreateSchema {
		dims, err := c.cfg.CostAttribution.dimensions()
		if err != nil {
			return err
		}
		if err := pricing.Configure(ctx, c.pool, c.cfg.Schema, dims, c.cfg.CostAttribution.LateWindow); err != nil {
			return err
		}
	}
	file := c.cfg.Pricing.File
	if file == "" {
		return nil
	}
	cat := pricing.Catalog{Pool: c.pool, Schema: c.cfg.Schema, File: file, Logger: c.logger}
	if _, err := cat.LoadNow(ctx); err != nil {
		return err
	}
	c.logger.Info("price file loaded", zap.String("file", file))
	return nil
}

// watchPrices reloads the price file when it changes, until shutdown.
func (c *client) watchPrices(ctx context.Context) {
	if c.cfg.Pricing.File == "" {
		return
	}
	// Its first poll loads the file again (it does not know what prepare
	// loaded): one redundant transaction, and no state shared with prepare.
	cat := &pricing.Catalog{Pool: c.pool, Schema: c.cfg.Schema, File: c.cfg.Pricing.File, Logger: c.logger}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		cat.Watch(ctx, c.cfg.Pricing.ReloadInterval, c.ready.Load)
	}()
}
