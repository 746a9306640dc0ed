package request

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

func makeTraces(spans int, service string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	ss := rs.ScopeSpans().AppendEmpty()
	for i := 0; i < spans; i++ {
		s := ss.Spans().AppendEmpty()
		s.SetName("op")
		s.SetTraceID(pcommon.TraceID{1, byte(i >> 8), byte(i)})
		s.SetSpanID(pcommon.SpanID{2, byte(i >> 8), byte(i)})
		s.SetStartTimestamp(1_700_000_000_123_456_789)
		s.SetEndTimestamp(1_700_000_001_000_000_000)
		s.Attributes().PutInt("i", int64(i))
	}
	return td
}
