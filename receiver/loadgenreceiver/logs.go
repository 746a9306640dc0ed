package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

// logsCursor makes log records, each tied to a span of its trace by trace
// and span id. A trace's records go first to its failing spans, then to the
// spans a service would log about, in a fixed order; a trace with more
// records than that list cycles through it again at Debug.
type logsCursor struct {
	walker
	content rng
	total   int64

	order []int8 // node indexes in logging order for the current trace

	ld     plog.Logs
	n      int
	scopes [numServices][podsPerService]plog.LogRecordSlice
	has    [numServices][podsPerService]bool
}

// logPriority is the order spans get log records in, after failing spans.
var logPriority = []spanKind{
	kindProxy, kindGateway, kindChat, kindRetrieval, kindTool, kindUsage, kindProvider, kindProvider2,
	kindCache, kindSessionDB, kindEmbed, kindVector, kindModeration, kindAuth,
}

func newLogsCursor(w *workload, users userRange) *logsCursor {
	c := &logsCursor{walker: newWalker(w, users), content: newRNG()}
	c.total = users.count() * int64(w.logsPerUser)
	return c
}

func (c *logsCursor) perTrace(t int) int {
	return share(c.w.logsPerUser, len(c.plan.traceSizes), t)
}

func (c *logsCursor) onUser() {}

func (c *logsCursor) onTrace() {
	c.w.reseed(c.content.src, streamLogs, c.plan.index, c.trace)
	s := &c.skel
	c.order = c.order[:0]
	// Failing spans, deepest first.
	for i := s.n - 1; i >= 0; i-- {
		if s.nodes[i].err {
			c.order = append(c.order, int8(i))
		}
	}
	for _, k := range logPriority {
		if i := s.at[k]; i >= 0 && !s.nodes[i].err {
			c.order = append(c.order, i)
		}
	}
}

// next returns up to batch_size log records and how many there are.
func (c *logsCursor) next() (plog.Logs, int) {
	c.ld, c.n = plog.NewLogs(), 0
	c.has = [numServices][podsPerService]bool{}
	for c.n < c.w.batchSize && c.advance(c.perTrace, c.onUser, c.onTrace) {
		nd := int(c.order[c.item%len(c.order)])
		c.fillRecord(nd, c.item >= len(c.order))
		c.item++
		c.n++
	}
	return c.ld, c.n
}

func (c *logsCursor) records(svc service) plog.LogRecordSlice {
	pod := c.skel.pod
	if !c.has[svc][pod] {
		rl := c.ld.ResourceLogs().AppendEmpty()
		fillResource(rl.Resource().Attributes(), svc, pod)
		sl := rl.ScopeLogs().AppendEmpty()
		fillScope(sl.Scope(), svc)
		c.scopes[svc][pod], c.has[svc][pod] = sl.LogRecords(), true
	}
	return c.scopes[svc][pod]
}

func (c *logsCursor) fillRecord(i int, again bool) {
	s, p, r := &c.skel, &c.plan, c.content
	nd := &s.nodes[i]
	lr := c.records(kindService[nd.kind]).AppendEmpty()
	lr.SetTraceID(s.id)
	lr.SetSpanID(nd.id)
	lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
	at := nd.end
	if again {
		at = nd.start + int64(r.Float64()*float64(nd.end-nd.start))
	}
	lr.SetTimestamp(pcommon.Timestamp(at))
	lr.SetObservedTimestamp(pcommon.Timestamp(at + int64(r.between(0.2, 40)*float64(time.Millisecond))))
	a := lr.Attributes()
	a.EnsureCapacity(13) // the most a record gets: the inference details event's
	a.PutStr("user.id", p.id)
	a.PutStr("session.id", s.session)
	a.PutStr("team", p.team)
	a.PutStr("project", p.project)
	a.PutStr("cost_center", p.costCenter)
	m := &modelCatalog[s.model]
	sev, body := plog.SeverityNumberInfo, ""

	switch {
	case again:
		sev = plog.SeverityNumberDebug
		body = "span " + spanNames[nd.kind] + " progress: " + text(r, 40+r.IntN(160))
	case nd.err && (nd.kind == kindProvider || nd.kind == kindProvider2):
		sev = plog.SeverityNumberError
		typ, msg := providerError(m, s.fail)
		body = "chat call to " + m.provider + " failed: " + msg
		a.PutStr("exception.type", typ)
		a.PutStr("exception.message", msg)
		a.PutStr("exception.stacktrace", stacktrace)
		a.PutStr("gen_ai.provider.name", m.provider)
		a.PutStr("gen_ai.request.model", m.request)
		a.PutStr("error.type", failureType[s.fail])
	case nd.err && nd.kind == kindSessionDB:
		sev = plog.SeverityNumberError
		body = "loading session history failed: ERROR: deadlock detected (SQLSTATE 40P01)"
		a.PutStr("exception.type", "pgx.PgError")
		a.PutStr("exception.message", "ERROR: deadlock detected (SQLSTATE 40P01)")
		a.PutStr("db.response.status_code", "40P01")
		a.PutStr("error.type", "40P01")
	case nd.err && nd.kind == kindProxy:
		sev = plog.SeverityNumberError
		body = "upstream " + m.provider + " call failed after " + strconv.Itoa(s.numCalls) + " attempt(s); returning " + strconv.Itoa(s.status)
		a.PutStr("error.type", failureType[s.fail])
	case nd.err:
		sev = plog.SeverityNumberWarn
		body = spanNames[nd.kind] + " returned " + strconv.Itoa(s.status) + " after " + ms(nd) + "ms"
		a.PutInt("http.response.status_code", int64(s.status))
	case nd.kind == kindProxy:
		// The semantic conventions' inference details event, with the
		// completion: the large log rows.
		lr.SetEventName("gen_ai.client.inference.operation.details")
		in, out, cost := s.totals()
		body = "chat completion " + m.request + " input_tokens=" + strconv.Itoa(in) + " output_tokens=" + strconv.Itoa(out) +
			" cost_usd=" + strconv.FormatFloat(cost, 'f', 6, 64) + " latency_ms=" + ms(nd)
		a.PutStr("gen_ai.operation.name", "chat")
		a.PutStr("gen_ai.provider.name", m.provider)
		a.PutStr("gen_ai.request.model", m.request)
		a.PutStr("gen_ai.response.model", m.response)
		a.PutInt("gen_ai.usage.input_tokens", int64(in))
		a.PutInt("gen_ai.usage.output_tokens", int64(out))
		a.PutDouble("gen_ai.usage.cost", cost)
		last := &s.calls[s.numCalls-1]
		a.PutStr("gen_ai.output.messages", outputMessages(r, min(last.outTokens*charsPerToken, 4096), last.finish))
	case nd.kind == kindGateway:
		body = "POST " + gatewayRoute + " " + strconv.Itoa(s.status) + " " + ms(nd) + "ms ua=\"" + p.client.userAgent + "\""
		a.PutStr("http.request.method", "POST")
		a.PutStr("http.route", gatewayRoute)
		a.PutInt("http.response.status_code", int64(s.status))
		a.PutStr("client.address", p.clientIP)
	case nd.kind == kindChat:
		body = "chat turn " + strconv.Itoa(s.index%p.sessionLen+1) + " answered with " + m.request
	case nd.kind == kindRetrieval:
		body = "retrieved " + strconv.Itoa(s.docs) + " chunks from kb-" + p.team + " in " + ms(nd) + "ms"
	case nd.kind == kindTool:
		body = "tool " + toolCatalog[s.tool].name + " returned in " + ms(nd) + "ms: " + text(r, 60+r.IntN(240))
		a.PutStr("gen_ai.tool.name", toolCatalog[s.tool].name)
	case nd.kind == kindUsage:
		in, out, cost := s.totals()
		body = "usage recorded tokens=" + strconv.Itoa(in+out) + " cost_usd=" + strconv.FormatFloat(cost, 'f', 6, 64)
	case nd.kind == kindProvider || nd.kind == kindProvider2:
		call := &s.calls[0]
		if nd.kind == kindProvider2 {
			call = &s.calls[1]
		}
		if call.ttft > 2*m.ttft {
			sev = plog.SeverityNumberWarn
			body = "slow first token from " + m.provider + ": " + strconv.FormatFloat(call.ttft, 'f', 3, 64) + "s for " + m.request
		} else {
			sev = plog.SeverityNumberDebug
			body = "POST https://" + m.host + m.path + " 200 in " + ms(nd) + "ms"
		}
	default:
		sev = plog.SeverityNumberDebug
		body = spanNames[nd.kind] + " done in " + ms(nd) + "ms"
	}
	lr.SetSeverityNumber(sev)
	lr.SetSeverityText(severityText[sev])
	lr.Body().SetStr(body)
}

var severityText = map[plog.SeverityNumber]string{
	plog.SeverityNumberDebug: "DEBUG",
	plog.SeverityNumberInfo:  "INFO",
	plog.SeverityNumberWarn:  "WARN",
	plog.SeverityNumberError: "ERROR",
}

var spanNames = [numKinds]string{
	kindGateway: "gateway request", kindAuth: "auth.verify_token", kindChat: "chat request",
	kindCache: "redis GET", kindSessionDB: "session load", kindRetrieval: "retrieval search",
	kindEmbed: "query embedding", kindVector: "vector search", kindTool: "tool call",
	kindProxy: "proxy request", kindModeration: "moderation check", kindProvider: "chat call",
	kindProvider2: "follow-up chat call", kindUsage: "usage insert",
}

// ms is a span's duration in whole milliseconds.
func ms(nd *spanNode) string { return strconv.FormatInt((nd.end-nd.start)/1e6, 10) }
