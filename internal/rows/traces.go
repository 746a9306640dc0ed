package rows

import (
	"strconv"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// AddTraces appends one spans row per span.
func (b *Batch) AddTraces(td ptrace.Traces) {
	c := &b.ctx
	for _, rs := range td.ResourceSpans().All() {
		c.setResource(rs.Resource(), rs.SchemaUrl())
		for _, ss := range rs.ScopeSpans().All() {
			c.setScope(ss.Scope(), ss.SchemaUrl())
			for _, s := range ss.Spans().All() {
				b.addRow(tables.IdxSpans, func() { b.writeSpan(s) })
			}
		}
	}
}

func (b *Batch) writeSpan(s ptrace.Span) {
	c := &b.ctx
	promo := b.layout().PromoColumns(tables.IdxSpans)
	resJSON := c.resJSON
	b.skip = b.skip[:0]
	if len(promo) > 0 {
		resJSON = b.resolve(tables.IdxSpans, promo, s.Attributes())
	}
	e := b.begin(tables.IdxSpans)
	start, end := s.StartTimestamp(), s.EndTimestamp()
	timestamp(e, start)
	e.Timestamptz(uint64(end))
	// The end's sub-microsecond rest is start + duration; the signed
	// difference keeps an end before start visible rather than wrapping.
	e.Int64(duration(uint64(start), uint64(end)))
	b.traceID(e, s.TraceID())
	e.ID8(s.SpanID())
	e.ID8(s.ParentSpanID())
	e.TextOrNull(s.TraceState().AsRaw())
	e.Int32(int32(s.Flags()))
	e.TextOrNull(c.service)
	e.Text(s.Name())
	enumText(e, s.Kind().String(), int32(s.Kind()))
	enumText(e, s.Status().Code().String(), int32(s.Status().Code()))
	e.TextOrNull(s.Status().Message())
	c.attributes(e, s.Attributes(), b.skip)

	if evs := s.Events(); evs.Len() > 0 {
		pos := e.BeginJSONB()
		e.AppendBuf(func(d []byte) []byte {
			d = append(d, '[')
			for i, ev := range evs.All() {
				if i > 0 {
					d = append(d, ',')
				}
				d = append(d, `{"time_unix_nano":`...)
				d = strconv.AppendUint(d, uint64(ev.Timestamp()), 10)
				d = append(d, `,"name":`...)
				d = c.json.AppendString(d, ev.Name())
				d = append(d, `,"attributes":`...)
				d = c.json.AppendMap(d, ev.Attributes())
				d = append(d, `,"dropped_attributes_count":`...)
				d = strconv.AppendUint(d, uint64(ev.DroppedAttributesCount()), 10)
				d = append(d, '}')
			}
			return append(d, ']')
		})
		e.End(pos)
	} else {
		e.Null()
	}

	if links := s.Links(); links.Len() > 0 {
		pos := e.BeginJSONB()
		e.AppendBuf(func(d []byte) []byte {
			d = append(d, '[')
			for i, l := range links.All() {
				if i > 0 {
					d = append(d, ',')
				}
				tid, sid := l.TraceID(), l.SpanID()
				d = append(d, `{"trace_id":`...)
				d = appendHexID(d, tid[:])
				d = append(d, `,"span_id":`...)
				d = appendHexID(d, sid[:])
				d = append(d, `,"trace_state":`...)
				d = c.json.AppendString(d, l.TraceState().AsRaw())
				d = append(d, `,"flags":`...)
				d = strconv.AppendUint(d, uint64(l.Flags()), 10)
				d = append(d, `,"attributes":`...)
				d = c.json.AppendMap(d, l.Attributes())
				d = append(d, `,"dropped_attributes_count":`...)
				d = strconv.AppendUint(d, uint64(l.DroppedAttributesCount()), 10)
				d = append(d, '}')
			}
			return append(d, ']')
		})
		e.End(pos)
	} else {
		e.Null()
	}

	e.Int32(int32(s.DroppedAttributesCount()))
	e.Int32(int32(s.DroppedEventsCount()))
	e.Int32(int32(s.DroppedLinksCount()))
	b.writeContext(e, resJSON)
	b.writePromoted(e, promo)
}
