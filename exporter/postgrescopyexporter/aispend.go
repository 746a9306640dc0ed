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
	a := &c.cfg.AISpendConfig
	if c.cfg.CreateSchema {
		dims, err := a.dimensions()
		if err != nil {
			return err
		}
		if err := pricing.Configure(ctx, c.pool, c.cfg.Schema, dims, a.CostAttribution.LateWindow); err != nil {
			return err
		}
	}
	if a.Pricing.File == "" {
		return nil
	}
	cat := pricing.Catalog{Pool: c.pool, Schema: c.cfg.Schema, File: a.Pricing.File, Logger: c.logger}
	if _, err := cat.LoadNow(ctx); err != nil {
		return err
	}
	c.logger.Info("price file loaded", zap.String("file", a.Pricing.File))
	return nil
}

// watchPrices reloads the price file when it changes, until shutdown.
func (c *client) watchPrices(ctx context.Context) {
	if c.cfg.AISpendConfig.Pricing.File == "" {
		return
	}
	// Its first poll loads the file again (it does not know what prepare
	// loaded): one redundant transaction, and no state shared with prepare.
	cat := &pricing.Catalog{Pool: c.pool, Schema: c.cfg.Schema, File: c.cfg.AISpendConfig.Pricing.File, Logger: c.logger}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		cat.Watch(ctx, c.cfg.AISpendConfig.Pricing.ReloadInterval, c.ready.Load)
	}()
}
