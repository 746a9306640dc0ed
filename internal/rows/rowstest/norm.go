package rowstest

import (
	"encoding/base64"
	"math"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// CleanString is the documented text stand-in: NUL and each invalid UTF-8
// byte become U+FFFD.
func CleanString(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && size == 1) {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// normValue applies the jsonb stand-ins: bytes as base64 strings, NaN and
// the infinities as strings, strings cleaned.
func normValue(v pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		v.SetStr(CleanString(v.Str()))
	case pcommon.ValueTypeBytes:
		v.SetStr(base64.StdEncoding.EncodeToString(v.Bytes().AsRaw()))
	case pcommon.ValueTypeDouble:
		switch f := v.Double(); {
		case math.IsNaN(f):
			v.SetStr("NaN")
		case math.IsInf(f, 1):
			v.SetStr("Infinity")
		case math.IsInf(f, -1):
			v.SetStr("-Infinity")
		}
	case pcommon.ValueTypeMap:
		normMap(v.Map())
	case pcommon.ValueTypeSlice:
		for _, e := range v.Slice().All() {
			normValue(e)
		}
	}
}

func normMap(m pcommon.Map) {
	old := pcommon.NewMap()
	m.MoveTo(old)
	for k, v := range old.All() {
		nv := m.PutEmpty(CleanString(k))
		v.CopyTo(nv)
		normValue(nv)
	}
}

func normScope(s pcommon.InstrumentationScope) {
	s.SetName(CleanString(s.Name()))
	s.SetVersion(CleanString(s.Version()))
	normMap(s.Attributes())
}

// NormTraces applies the documented stand-ins to td in place: what a
// round trip through the tables gives back.
func NormTraces(td ptrace.Traces) {
	for _, rs := range td.ResourceSpans().All() {
		normMap(rs.Resource().Attributes())
		for _, ss := range rs.ScopeSpans().All() {
			normScope(ss.Scope())
			for _, s := range ss.Spans().All() {
				s.SetName(CleanString(s.Name()))
				s.Status().SetMessage(CleanString(s.Status().Message()))
				normMap(s.Attributes())
				for _, ev := range s.Events().All() {
					ev.SetName(CleanString(ev.Name()))
					normMap(ev.Attributes())
				}
				for _, l := range s.Links().All() {
					normMap(l.Attributes())
				}
			}
		}
	}
}

// NormLogs is NormTraces for logs.
func NormLogs(ld plog.Logs) {
	for _, rl := range ld.ResourceLogs().All() {
		normMap(rl.Resource().Attributes())
		for _, sl := range rl.ScopeLogs().All() {
			normScope(sl.Scope())
			for _, l := range sl.LogRecords().All() {
				l.SetSeverityText(CleanString(l.SeverityText()))
				l.SetEventName(CleanString(l.EventName()))
				normMap(l.Attributes())
				normValue(l.Body())
			}
		}
	}
}

// NormMetrics is NormTraces for metrics.
func NormMetrics(md pmetric.Metrics) {
	for _, rm := range md.ResourceMetrics().All() {
		normMap(rm.Resource().Attributes())
		for _, sm := range rm.ScopeMetrics().All() {
			normScope(sm.Scope())
			for _, m := range sm.Metrics().All() {
				m.SetDescription(CleanString(m.Description()))
				normMap(m.Metadata())
				points := func(attrs pcommon.Map, ex pmetric.ExemplarSlice) {
					normMap(attrs)
					for _, x := range ex.All() {
						normMap(x.FilteredAttributes())
					}
				}
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					for _, dp := range m.Gauge().DataPoints().All() {
						points(dp.Attributes(), dp.Exemplars())
					}
				case pmetric.MetricTypeSum:
					for _, dp := range m.Sum().DataPoints().All() {
						points(dp.Attributes(), dp.Exemplars())
					}
				case pmetric.MetricTypeHistogram:
					for _, dp := range m.Histogram().DataPoints().All() {
						points(dp.Attributes(), dp.Exemplars())
					}
				case pmetric.MetricTypeExponentialHistogram:
					for _, dp := range m.ExponentialHistogram().DataPoints().All() {
						points(dp.Attributes(), dp.Exemplars())
					}
				case pmetric.MetricTypeSummary:
					for _, dp := range m.Summary().DataPoints().All() {
						normMap(dp.Attributes())
					}
				}
			}
		}
	}
}
