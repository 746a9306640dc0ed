package pgsink

import (
	"context"

	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/pricing"
)

// prepareAISpend runs in prepare, after the promoted columns exist and
// before the first maintenance: the cost view gets the configured
// dimensions (owner only: create_schema) and the catalog the price file, so
// that the first rollup prices with them.
func (c *Sink) prepareAISpend(ctx context.Context) error {
	if c.cfg.CreateSchema {
		if err := pricing.Configure(ctx, c.pool, c.cfg.Schema, c.cfg.CostDimensions, c.cfg.CostLateWindow); err != nil {
			return err
		}
	}
	file := c.cfg.PriceFile
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
func (c *Sink) watchPrices(ctx context.Context) {
	if c.cfg.PriceFile == "" {
		return
	}
	// Its first poll loads the file again (it does not know what prepare
	// loaded): one redundant transaction, and no state shared with prepare.
	cat := &pricing.Catalog{Pool: c.pool, Schema: c.cfg.Schema, File: c.cfg.PriceFile, Logger: c.logger}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		cat.Watch(ctx, c.cfg.PriceReload, c.ready.Load)
	}()
}
