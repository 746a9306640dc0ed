package pgsink

import (
	"context"

	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// reportRejects counts the rows PostgreSQL refused in b's last write (the
// writer stored them in the rejects table) and logs them once for the batch,
// never once per row.
func (c *Sink) reportRejects(ctx context.Context, b *rows.Batch) {
	rej := b.Rejects()
	if len(rej) == 0 {
		return
	}
	var perTable [len(tables.Tables)]int
	for _, r := range rej {
		perTable[r.Table]++
	}
	byTable := make(map[string]int, 2)
	for i, n := range perTable {
		if n == 0 {
			continue
		}
		name := tables.Tables[i].Name
		byTable[name] = n
		c.rec.Rejected(ctx, name, n)
	}
	c.logger.Warn("PostgreSQL refused rows of a batch; they are in the rejects table and the rest is written",
		zap.String("schema", c.cfg.Schema), zap.Int("rejected", len(rej)), zap.Int("batch_rows", b.TotalRows()),
		zap.Any("rejected_by_table", byTable), zap.NamedError("first_reason", rej[0].Err))
}
