package rows

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// AddLogs appends one logs row per log record.
func (b *Batch) AddLogs(ld plog.Logs) {
	c := &b.ctx
	for _, rl := range ld.ResourceLogs().All() {
		c.setResource(rl.Resource(), rl.SchemaUrl())
		for _, sl := range rl.ScopeLogs().All() {
			c.setScope(sl.Scope(), sl.SchemaUrl())
			for _, l := range sl.LogRecords().All() {
				b.addRow(tables.IdxLogs, func() { b.writeLog(l) })
			}
		}
	}
}

func (b *Batch) writeLog(l plog.LogRecord) {
	c := &b.ctx
	promo := b.layout().PromoColumns(tables.IdxLogs)
	resJSON := c.resJSON
	b.skip = b.skip[:0]
	if len(promo) > 0 {
		resJSON = b.resolve(tables.IdxLogs, promo, l.Attributes())
	}
	e := b.begin(tables.IdxLogs)
	timestamp(e, l.Timestamp())
	timestamp(e, l.ObservedTimestamp())
	b.traceID(e, l.TraceID())
	e.ID8(l.SpanID())
	e.Int32(int32(l.Flags()))
	e.Int32(int32(l.SeverityNumber()))
	e.TextOrNull(l.SeverityText())
	e.TextOrNull(c.service)
	if body := l.Body(); body.Type() != pcommon.ValueTypeEmpty {
		pos := e.BeginJSONB()
		e.AppendBuf(func(d []byte) []byte { return c.json.AppendValue(d, body) })
		e.End(pos)
	} else {
		e.Null()
	}
	e.TextOrNull(l.EventName())
	c.attributes(e, l.Attributes(), b.skip)
	e.Int32(int32(l.DroppedAttributesCount()))
	b.writeContext(e, resJSON)
	b.writePromoted(e, promo)
	b.writeShardKey(e, tables.IdxLogs, l.TraceID())
}
