package traceread

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// spanColumns are the columns of the spans view a span is rebuilt from, in
// the order spanRow.dest scans them.
const spanColumns = `start_time, start_time_frac_ns, duration_ns, trace_id, span_id, parent_span_id,
	trace_state, flags, span_name, span_kind, status_code, status_message, span_attributes, events, links,
	dropped_attributes_count, dropped_events_count, dropped_links_count,
	scope_name, scope_version, resource_attributes, scope_attributes,
	resource_dropped_attributes_count, scope_dropped_attributes_count, resource_schema_url, scope_schema_url`

// spanRow is one row of the spans view.
type spanRow struct {
	start                   time.Time
	frac                    int16
	dur                     int64
	tid                     pgtype.UUID
	sid, psid               pgtype.Int8
	state, statusMsg        pgtype.Text
	flags                   int32
	name, kind, status      string
	attrs, events, links    []byte
	dAttrs, dEvents, dLinks int32
	scopeName, scopeVersion pgtype.Text
	resAttrs, scopeAttrs    []byte
	resDropped, scopeDrop   int32
	resSchema, scopeSchema  pgtype.Text
}

func (r *spanRow) dest() []any {
	return []any{&r.start, &r.frac, &r.dur, &r.tid, &r.sid, &r.psid, &r.state, &r.flags,
		&r.name, &r.kind, &r.status, &r.statusMsg, &r.attrs, &r.events, &r.links,
		&r.dAttrs, &r.dEvents, &r.dLinks,
		&r.scopeName, &r.scopeVersion, &r.resAttrs, &r.scopeAttrs, &r.resDropped, &r.scopeDrop,
		&r.resSchema, &r.scopeSchema}
}

// resourceKey and scopeKey identify a row's resource and scope: rows that
// share them are rebuilt under one ResourceSpans and ScopeSpans.
func (r *spanRow) resourceKey() string {
	return fmt.Sprintf("%s\x00%d\x00%s", r.resAttrs, r.resDropped, r.resSchema.String)
}

func (r *spanRow) scopeKey() string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%s", r.scopeName.String, r.scopeVersion.String, r.scopeAttrs, r.scopeDrop, r.scopeSchema.String)
}

// assembler rebuilds one ptrace.Traces from rows, grouping them by resource
// and scope in the order they first appear.
type assembler struct {
	td     ptrace.Traces
	res    map[string]ptrace.ResourceSpans
	scopes map[string]ptrace.ScopeSpans
	spans  int
}

func newAssembler() *assembler {
	return &assembler{td: ptrace.NewTraces(), res: map[string]ptrace.ResourceSpans{}, scopes: map[string]ptrace.ScopeSpans{}}
}

func (a *assembler) add(r *spanRow) error {
	rk := r.resourceKey()
	rs, ok := a.res[rk]
	if !ok {
		rs = a.td.ResourceSpans().AppendEmpty()
		if err := fillMap(rs.Resource().Attributes(), r.resAttrs); err != nil {
			return fmt.Errorf("resource_attributes: %w", err)
		}
		rs.Resource().SetDroppedAttributesCount(uint32(r.resDropped))
		rs.SetSchemaUrl(r.resSchema.String)
		a.res[rk] = rs
	}
	sk := rk + "\x01" + r.scopeKey()
	ss, ok := a.scopes[sk]
	if !ok {
		ss = rs.ScopeSpans().AppendEmpty()
		sc := ss.Scope()
		sc.SetName(r.scopeName.String)
		sc.SetVersion(r.scopeVersion.String)
		if err := fillMap(sc.Attributes(), r.scopeAttrs); err != nil {
			return fmt.Errorf("scope_attributes: %w", err)
		}
		sc.SetDroppedAttributesCount(uint32(r.scopeDrop))
		ss.SetSchemaUrl(r.scopeSchema.String)
		a.scopes[sk] = ss
	}
	a.spans++
	return r.fill(ss.Spans().AppendEmpty())
}

// fill sets s from the row, under the tables' conventions (README, Schema).
func (r *spanRow) fill(s ptrace.Span) error {
	if r.frac < 0 || r.frac > 999 {
		return fmt.Errorf("start_time_frac_ns %d out of range", r.frac)
	}
	start := pcommon.Timestamp(uint64(r.start.UnixMicro())*1000 + uint64(r.frac))
	s.SetStartTimestamp(start)
	s.SetEndTimestamp(pcommon.Timestamp(int64(start) + r.dur))
	if r.tid.Valid {
		s.SetTraceID(r.tid.Bytes)
	}
	s.SetSpanID(spanID(r.sid))
	s.SetParentSpanID(spanID(r.psid))
	s.TraceState().FromRaw(r.state.String)
	s.SetFlags(uint32(r.flags))
	s.SetName(r.name)
	kind, ok := spanKinds[r.kind]
	if !ok {
		return fmt.Errorf("span_kind %q unknown", r.kind)
	}
	s.SetKind(kind)
	code, ok := statusCodes[r.status]
	if !ok {
		return fmt.Errorf("status_code %q unknown", r.status)
	}
	s.Status().SetCode(code)
	s.Status().SetMessage(r.statusMsg.String)
	if err := fillMap(s.Attributes(), r.attrs); err != nil {
		return fmt.Errorf("span_attributes: %w", err)
	}
	s.SetDroppedAttributesCount(uint32(r.dAttrs))
	s.SetDroppedEventsCount(uint32(r.dEvents))
	s.SetDroppedLinksCount(uint32(r.dLinks))
	if r.events != nil {
		if err := fillEvents(s.Events(), r.events); err != nil {
			return fmt.Errorf("events: %w", err)
		}
	}
	if r.links != nil {
		if err := fillLinks(s.Links(), r.links); err != nil {
			return fmt.Errorf("links: %w", err)
		}
	}
	return nil
}

var (
	spanKinds   = map[string]ptrace.SpanKind{}
	statusCodes = map[string]ptrace.StatusCode{}
)

func init() {
	// The columns hold the enums' String() forms (internal/rows).
	for _, k := range []ptrace.SpanKind{ptrace.SpanKindUnspecified, ptrace.SpanKindInternal, ptrace.SpanKindServer,
		ptrace.SpanKindClient, ptrace.SpanKindProducer, ptrace.SpanKindConsumer} {
		spanKinds[k.String()] = k
		name := ""
		if k != ptrace.SpanKindUnspecified {
			name = strings.ToLower(k.String())
			jaegerKinds[name] = k.String()
		}
		kindNames[k.String()] = name
	}
	for _, c := range []ptrace.StatusCode{ptrace.StatusCodeUnset, ptrace.StatusCodeOk, ptrace.StatusCodeError} {
		statusCodes[c.String()] = c
	}
}

// spanID is the inverse of the bigint encoding: the same 8 bytes, NULL for
// the absent id.
func spanID(v pgtype.Int8) pcommon.SpanID {
	var id pcommon.SpanID
	if v.Valid {
		binary.BigEndian.PutUint64(id[:], uint64(v.Int64))
	}
	return id
}

func fillEvents(evs ptrace.SpanEventSlice, doc []byte) error {
	var xs []struct {
		TimeUnixNano           uint64          `json:"time_unix_nano"`
		Name                   string          `json:"name"`
		Attributes             json.RawMessage `json:"attributes"`
		DroppedAttributesCount uint32          `json:"dropped_attributes_count"`
	}
	if err := json.Unmarshal(doc, &xs); err != nil {
		return err
	}
	evs.EnsureCapacity(len(xs))
	for _, x := range xs {
		ev := evs.AppendEmpty()
		ev.SetTimestamp(pcommon.Timestamp(x.TimeUnixNano))
		ev.SetName(x.Name)
		if err := fillMap(ev.Attributes(), x.Attributes); err != nil {
			return err
		}
		ev.SetDroppedAttributesCount(x.DroppedAttributesCount)
	}
	return nil
}

func fillLinks(ls ptrace.SpanLinkSlice, doc []byte) error {
	var xs []struct {
		TraceID                string          `json:"trace_id"`
		SpanID                 string          `json:"span_id"`
		TraceState             string          `json:"trace_state"`
		Flags                  uint32          `json:"flags"`
		Attributes             json.RawMessage `json:"attributes"`
		DroppedAttributesCount uint32          `json:"dropped_attributes_count"`
	}
	if err := json.Unmarshal(doc, &xs); err != nil {
		return err
	}
	ls.EnsureCapacity(len(xs))
	for _, x := range xs {
		l := ls.AppendEmpty()
		var tid pcommon.TraceID
		if err := hexID(tid[:], x.TraceID); err != nil {
			return fmt.Errorf("trace_id: %w", err)
		}
		var sid pcommon.SpanID
		if err := hexID(sid[:], x.SpanID); err != nil {
			return fmt.Errorf("span_id: %w", err)
		}
		l.SetTraceID(tid)
		l.SetSpanID(sid)
		l.TraceState().FromRaw(x.TraceState)
		l.SetFlags(x.Flags)
		if err := fillMap(l.Attributes(), x.Attributes); err != nil {
			return err
		}
		l.SetDroppedAttributesCount(x.DroppedAttributesCount)
	}
	return nil
}

// hexID decodes s into id; an empty string is the absent id.
func hexID(id []byte, s string) error {
	if s == "" {
		return nil
	}
	if hex.DecodedLen(len(s)) != len(id) {
		return fmt.Errorf("%d hex digits, want %d", len(s), 2*len(id))
	}
	_, err := hex.Decode(id, []byte(s))
	return err
}

// fillMap puts the attributes of a stored jsonb object into m. An absent
// document (NULL, or an event's missing attributes) is the empty map.
func fillMap(m pcommon.Map, doc []byte) error {
	if len(doc) == 0 || string(doc) == "null" {
		return nil
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil {
		return err
	}
	obj, ok := x.(map[string]any)
	if !ok {
		return errors.New("not a JSON object")
	}
	return setMap(m, obj)
}

func setMap(m pcommon.Map, x map[string]any) error {
	m.EnsureCapacity(len(x))
	for k, e := range x {
		if err := setValue(m.PutEmpty(k), e); err != nil {
			return err
		}
	}
	return nil
}

// setValue is the inverse of jsonb.AppendValue under the tables'
// conventions: a number with a decimal point or an exponent is a double, any
// other number an int, null the empty value.
func setValue(v pcommon.Value, x any) error {
	switch x := x.(type) {
	case nil:
	case bool:
		v.SetBool(x)
	case string:
		v.SetStr(x)
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			f, err := strconv.ParseFloat(string(x), 64)
			if err != nil {
				return err
			}
			v.SetDouble(f)
			return nil
		}
		i, err := strconv.ParseInt(string(x), 10, 64)
		if err != nil {
			return err
		}
		v.SetInt(i)
	case []any:
		s := v.SetEmptySlice()
		s.EnsureCapacity(len(x))
		for _, e := range x {
			if err := setValue(s.AppendEmpty(), e); err != nil {
				return err
			}
		}
	case map[string]any:
		return setMap(v.SetEmptyMap(), x)
	default:
		return fmt.Errorf("unexpected JSON value %T", x)
	}
	return nil
}
