package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// tracesCursor turns skeletons into spans with their attributes. Content
// (payload text, small random values) comes from the spans stream of each
// trace, so it does not shift when batches split a trace.
type tracesCursor struct {
	walker
	content rng
	total   int64
	traces  int64 // traces begun, for Stats

	td     ptrace.Traces
	n      int
	scopes [numServices][podsPerService]ptrace.SpanSlice
	has    [numServices][podsPerService]bool
}

func newTracesCursor(w *workload, users userRange) *tracesCursor {
	c := &tracesCursor{walker: newWalker(w, users), content: newRNG()}
	c.total = users.count() * int64(w.spansPerUser)
	return c
}

func (c *tracesCursor) perTrace(t int) int { return c.plan.traceSizes[t] }
func (c *tracesCursor) onUser()            {}
func (c *tracesCursor) onTrace() {
	c.w.reseed(c.content.src, streamSpans, c.plan.index, c.trace)
}

// next returns up to batch_size spans and how many there are.
func (c *tracesCursor) next() (ptrace.Traces, int) {
	c.td, c.n = ptrace.NewTraces(), 0
	c.has = [numServices][podsPerService]bool{}
	for c.n < c.w.batchSize && c.advance(c.perTrace, c.onUser, c.onTrace) {
		if c.item == 0 {
			c.traces++
		}
		nd := &c.skel.nodes[c.item]
		c.fillSpan(c.scope(kindService[nd.kind]).AppendEmpty(), nd)
		c.item++
		c.n++
	}
	return c.td, c.n
}

// scope returns the span slice of the current trace's pod of svc, creating
// its resource on first use in the batch.
func (c *tracesCursor) scope(svc service) ptrace.SpanSlice {
	pod := c.skel.pod
	if !c.has[svc][pod] {
		rs := c.td.ResourceSpans().AppendEmpty()
		fillResource(rs.Resource().Attributes(), svc, pod)
		ss := rs.ScopeSpans().AppendEmpty()
		fillScope(ss.Scope(), svc)
		c.scopes[svc][pod], c.has[svc][pod] = ss.Spans(), true
	}
	return c.scopes[svc][pod]
}

var serviceNames = [numServices]string{"api-gateway", "chat-service", "retrieval-service", "llm-proxy"}
var serviceVersions = [numServices]string{"2.14.3", "1.31.0", "0.9.12", "3.2.1"}
var serviceLanguages = [numServices]string{"go", "python", "python", "go"}

func fillResource(m pcommon.Map, svc service, pod int) {
	name := serviceNames[svc]
	podName := name + "-7d9c5b8f6-" + [podsPerService]string{"x2kqp", "m8tzr", "b4wnj"}[pod]
	m.EnsureCapacity(11)
	m.PutStr("service.name", name)
	m.PutStr("service.namespace", "ai-platform")
	m.PutStr("service.version", serviceVersions[svc])
	m.PutStr("service.instance.id", podName)
	m.PutStr("deployment.environment.name", "production")
	m.PutStr("k8s.namespace.name", "ai-platform")
	m.PutStr("k8s.pod.name", podName)
	m.PutStr("cloud.provider", "gcp")
	m.PutStr("cloud.region", "us-central1")
	m.PutStr("telemetry.sdk.name", "opentelemetry")
	m.PutStr("telemetry.sdk.language", serviceLanguages[svc])
}

func fillScope(s pcommon.InstrumentationScope, svc service) {
	s.SetName("github.com/acme/ai-platform/" + serviceNames[svc])
	s.SetVersion(serviceVersions[svc])
}

// Where the services and their databases live.
const (
	gatewayHost   = "ai-gateway.acme.example"
	gatewayRoute  = "/v1/chat/completions"
	chatHost      = "chat-service.ai-platform.svc.cluster.local"
	retrievalHost = "retrieval-service.ai-platform.svc.cluster.local"
	proxyHost     = "llm-proxy.ai-platform.svc.cluster.local"
	redisHost     = "redis-chat.ai-platform.svc.cluster.local"
	chatDBHost    = "pg-chat-primary.ai-platform.svc.cluster.local"
	kbDBHost      = "pg-kb-primary.ai-platform.svc.cluster.local"
	billingDBHost = "pg-billing-primary.ai-platform.svc.cluster.local"

	sessionSQL = "SELECT m.id, m.role, m.content, m.created_at, m.token_count FROM chat.messages m JOIN chat.sessions s ON s.id = m.session_id WHERE s.id = $1 AND s.user_id = $2 AND m.deleted_at IS NULL ORDER BY m.created_at DESC LIMIT $3"
	vectorSQL  = "SELECT c.id, c.document_id, c.content, 1 - (c.embedding <=> $1) AS score FROM kb.chunks c WHERE c.index_name = $2 AND c.acl && $3 ORDER BY c.embedding <=> $1 LIMIT $4"
	usageSQL   = "INSERT INTO billing.usage_events (user_id, team, project, cost_center, provider, model, input_tokens, output_tokens, cost_usd, session_id, trace_id, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
)

// charsPerToken turns token counts into payload sizes.
const charsPerToken = 4

// maxContentChars truncates captured prompt and completion text, as
// instrumentations do.
const maxContentChars = 16 << 10

func (c *tracesCursor) fillSpan(sp ptrace.Span, nd *spanNode) {
	s, p, r := &c.skel, &c.plan, c.content
	sp.SetTraceID(s.id)
	sp.SetSpanID(nd.id)
	if nd.parent >= 0 {
		sp.SetParentSpanID(s.nodes[nd.parent].id)
	}
	sp.SetStartTimestamp(pcommon.Timestamp(nd.start))
	sp.SetEndTimestamp(pcommon.Timestamp(nd.end))
	a := sp.Attributes()
	a.EnsureCapacity(24)
	// Who pays: on every span, so any span row can be attributed.
	a.PutStr("user.id", p.id)
	a.PutStr("session.id", s.session)
	a.PutStr("team", p.team)
	a.PutStr("project", p.project)
	a.PutStr("cost_center", p.costCenter)
	m := &modelCatalog[s.model]
	status := 200
	if nd.err {
		status = s.status
	}

	switch nd.kind {
	case kindGateway:
		sp.SetName("POST " + gatewayRoute)
		sp.SetKind(ptrace.SpanKindServer)
		putServerHTTP(a, gatewayRoute, "https", gatewayHost, 443, status)
		a.PutStr("url.full", "https://"+gatewayHost+gatewayRoute)
		a.PutStr("client.address", p.clientIP)
		a.PutStr("user_agent.original", p.client.userAgent)
		a.PutStr("app.name", p.client.name)
		a.PutStr("network.protocol.version", "2")
		a.PutInt("http.request.body.size", int64(s.calls[0].inTokens*charsPerToken+200))
		a.PutInt("http.response.body.size", int64(s.calls[s.numCalls-1].outTokens*charsPerToken+350))
		a.PutStr("gen_ai.request.model", m.request)
		a.PutStr("http.request.header.x-request-id", r.hexID(16))
	case kindAuth:
		sp.SetName("auth.verify_token")
		sp.SetKind(ptrace.SpanKindInternal)
		a.PutStr("auth.method", [2]string{"api_key", "oidc"}[p.index%2])
		a.PutStr("auth.key_id", "key_"+p.id[4:])
		a.PutStr("auth.result", "allowed")
		a.PutStr("auth.scopes", "chat:write models:read tools:execute")
	case kindChat:
		sp.SetName("POST /internal/v1/chat")
		sp.SetKind(ptrace.SpanKindServer)
		putServerHTTP(a, "/internal/v1/chat", "http", chatHost, 8080, status)
		a.PutStr("gen_ai.conversation.id", s.session)
		a.PutInt("chat.turn", int64(s.index%p.sessionLen+1))
		a.PutInt("chat.history.messages", int64(2*(s.index%p.sessionLen)+1))
		a.PutStr("gen_ai.request.model", m.request)
		a.PutStr("chat.user_message", text(r, 150+r.IntN(700)))
	case kindCache:
		sp.SetName("GET")
		sp.SetKind(ptrace.SpanKindClient)
		a.PutStr("db.system.name", "redis")
		a.PutStr("db.operation.name", "GET")
		a.PutStr("db.query.text", "GET chat:summary:"+s.session)
		a.PutStr("server.address", redisHost)
		a.PutInt("server.port", 6379)
		a.PutBool("cache.hit", s.cacheHit)
	case kindSessionDB:
		sp.SetName("SELECT chat.messages")
		sp.SetKind(ptrace.SpanKindClient)
		putDB(a, "chat", "messages", "SELECT", sessionSQL, chatDBHost)
		if nd.err {
			a.PutStr("db.response.status_code", "40P01")
			a.PutStr("error.type", "40P01")
			c.fail(sp, nd, "pgx.PgError", "ERROR: deadlock detected (SQLSTATE 40P01)")
		} else {
			a.PutInt("db.response.returned_rows", int64(2*(s.index%p.sessionLen)+1))
		}
	case kindRetrieval:
		sp.SetName("POST /v1/search")
		sp.SetKind(ptrace.SpanKindServer)
		putServerHTTP(a, "/v1/search", "http", retrievalHost, 8080, status)
		a.PutStr("retrieval.index", "kb-"+p.team)
		a.PutInt("retrieval.top_k", int64(s.docs))
		a.PutStr("retrieval.query", text(r, 40+r.IntN(200)))
		a.PutStr("retrieval.documents", c.documents())
	case kindEmbed:
		sp.SetName("embeddings " + embedModel.request)
		sp.SetKind(ptrace.SpanKindClient)
		a.PutStr("gen_ai.operation.name", "embeddings")
		a.PutStr("gen_ai.provider.name", embedModel.provider)
		a.PutStr("gen_ai.request.model", embedModel.request)
		a.PutStr("gen_ai.response.model", embedModel.response)
		a.PutInt("gen_ai.usage.input_tokens", int64(s.embedIn))
		a.PutDouble("gen_ai.usage.cost", embedModel.cost(s.embedIn, 0))
		a.PutInt("gen_ai.embeddings.dimension.count", 1536)
		putClientHTTP(a, embedModel.host, embedModel.path, 200)
	case kindVector:
		sp.SetName("SELECT kb.chunks")
		sp.SetKind(ptrace.SpanKindClient)
		putDB(a, "kb", "chunks", "SELECT", vectorSQL, kbDBHost)
		a.PutInt("db.response.returned_rows", int64(s.docs))
	case kindTool:
		t := &toolCatalog[s.tool]
		sp.SetName("execute_tool " + t.name)
		sp.SetKind(ptrace.SpanKindInternal)
		a.PutStr("gen_ai.operation.name", "execute_tool")
		a.PutStr("gen_ai.tool.name", t.name)
		a.PutStr("gen_ai.tool.type", "function")
		a.PutStr("gen_ai.tool.call.id", "call_"+r.hexID(12))
		a.PutStr("gen_ai.tool.call.arguments", fmt.Sprintf(t.args, text(r, 12+r.IntN(40))))
		a.PutStr("gen_ai.tool.call.result", text(r, 500+r.IntN(2000)))
	case kindProxy:
		sp.SetName("POST /v1/chat")
		sp.SetKind(ptrace.SpanKindServer)
		putServerHTTP(a, "/v1/chat", "http", proxyHost, 4000, status)
		in, out, cost := s.totals()
		a.PutStr("gen_ai.operation.name", "chat")
		a.PutStr("gen_ai.provider.name", m.provider)
		a.PutStr("gen_ai.request.model", m.request)
		a.PutStr("gen_ai.response.model", m.response)
		a.PutInt("gen_ai.usage.input_tokens", int64(in))
		a.PutInt("gen_ai.usage.output_tokens", int64(out))
		a.PutDouble("gen_ai.usage.cost", cost)
		a.PutStr("llm_proxy.virtual_key", "vk_"+p.team+"_"+p.project)
		a.PutInt("llm_proxy.attempts", int64(s.numCalls))
		if nd.err {
			a.PutStr("error.type", failureType[s.fail])
			sp.Status().SetCode(ptrace.StatusCodeError)
			sp.Status().SetMessage("upstream provider call failed: " + failureType[s.fail])
		}
	case kindModeration:
		sp.SetName("moderation omni-moderation-latest")
		sp.SetKind(ptrace.SpanKindClient)
		a.PutStr("gen_ai.operation.name", "moderation")
		a.PutStr("gen_ai.provider.name", "openai")
		a.PutStr("gen_ai.request.model", "omni-moderation-latest")
		a.PutBool("moderation.flagged", false)
		putClientHTTP(a, "api.openai.com", "/v1/moderations", 200)
	case kindProvider, kindProvider2:
		call := &s.calls[0]
		if nd.kind == kindProvider2 {
			call = &s.calls[1]
		}
		c.fillChatCall(sp, nd, call, m)
	case kindUsage:
		sp.SetName("INSERT billing.usage_events")
		sp.SetKind(ptrace.SpanKindClient)
		putDB(a, "billing", "usage_events", "INSERT", usageSQL, billingDBHost)
		a.PutInt("db.response.returned_rows", 1)
	}
	if nd.err && nd.kind != kindSessionDB && nd.kind != kindProxy && nd.kind != kindProvider && nd.kind != kindProvider2 {
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage("HTTP " + strconv.Itoa(status))
	}
}

var failureType = [...]string{
	failRateLimit:   "429",
	failServer:      "500",
	failUnavailable: "503",
	failTimeout:     "timeout",
	failDB:          "40P01",
}

// totals sums the trace's chat calls, as the proxy reports them.
func (s *traceSkel) totals() (in, out int, cost float64) {
	for i := range s.numCalls {
		in += s.calls[i].inTokens
		out += s.calls[i].outTokens
		cost += s.calls[i].cost
	}
	return in, out, cost
}

func (c *tracesCursor) fillChatCall(sp ptrace.Span, nd *spanNode, call *llmCall, m *model) {
	s, r, a := &c.skel, c.content, sp.Attributes()
	sp.SetName("chat " + m.request)
	sp.SetKind(ptrace.SpanKindClient)
	a.PutStr("gen_ai.operation.name", "chat")
	a.PutStr("gen_ai.provider.name", m.provider)
	a.PutStr("gen_ai.request.model", m.request)
	a.PutDouble("gen_ai.request.temperature", float64(r.IntN(11))/10)
	a.PutInt("gen_ai.request.max_tokens", 4096)
	a.PutStr("gen_ai.conversation.id", s.session)
	a.PutInt("gen_ai.usage.input_tokens", int64(call.inTokens))
	a.PutStr("gen_ai.input.messages", inputMessages(r, s, call.inTokens*charsPerToken))
	status := 200
	if call.failed {
		status = [...]int{failRateLimit: 429, failServer: 500, failUnavailable: 503, failTimeout: 0}[s.fail]
		a.PutStr("error.type", failureType[s.fail])
	} else {
		a.PutStr("gen_ai.response.model", m.response)
		a.PutStr("gen_ai.response.id", "chatcmpl-"+r.hexID(12))
		a.PutEmptySlice("gen_ai.response.finish_reasons").AppendEmpty().SetStr(call.finish)
		a.PutInt("gen_ai.usage.output_tokens", int64(call.outTokens))
		a.PutDouble("gen_ai.usage.cost", call.cost)
		a.PutDouble("gen_ai.server.time_to_first_token", call.ttft)
		a.PutStr("gen_ai.output.messages", outputMessages(r, call.outTokens*charsPerToken, call.finish))
	}
	putClientHTTP(a, m.host, m.path, status)
	if call.failed {
		typ, msg := providerError(m, s.fail)
		c.fail(sp, nd, typ, msg)
	}
}

func providerError(m *model, f failure) (typ, msg string) {
	switch f {
	case failRateLimit:
		return m.provider + ".RateLimitError", "Error code: 429 - rate limit reached for " + m.request + " on tokens per min (TPM): limit 2000000, used 1996421, requested 8311. Please try again in 187ms."
	case failServer:
		return m.provider + ".InternalServerError", "Error code: 500 - the server had an error while processing your request. Sorry about that!"
	case failUnavailable:
		return m.provider + ".APIStatusError", "Error code: 503 - the engine is currently overloaded, please try again later"
	default:
		return "context.DeadlineExceeded", "context deadline exceeded after 60s waiting for " + m.host
	}
}

// fail marks a span Error with an exception event, as OTel SDKs record them.
func (c *tracesCursor) fail(sp ptrace.Span, nd *spanNode, typ, msg string) {
	sp.Status().SetCode(ptrace.StatusCodeError)
	sp.Status().SetMessage(msg)
	ev := sp.Events().AppendEmpty()
	ev.SetName("exception")
	ev.SetTimestamp(pcommon.Timestamp(nd.end))
	ea := ev.Attributes()
	ea.PutStr("exception.type", typ)
	ea.PutStr("exception.message", msg)
	ea.PutStr("exception.stacktrace", stacktrace)
}

const stacktrace = `goroutine 1841 [running]:
github.com/acme/ai-platform/llm-proxy/internal/upstream.(*Client).Chat(0xc000a1e000, {0x1a2b3c0, 0xc0004f2e10}, 0xc0012c4000)
	/src/internal/upstream/client.go:214 +0x5a7
github.com/acme/ai-platform/llm-proxy/internal/router.(*Router).route(0xc0001b6480, {0x1a2b3c0, 0xc0004f2e10}, 0xc0012c4000)
	/src/internal/router/router.go:131 +0x2f1
github.com/acme/ai-platform/llm-proxy/internal/server.(*Handler).ServeChat(0xc0001c2000, {0x1a30f40, 0xc000d7e0e0}, 0xc000c3a200)
	/src/internal/server/chat.go:88 +0x4b6
net/http.HandlerFunc.ServeHTTP(0xc000c3a100?, {0x1a30f40?, 0xc000d7e0e0?}, 0x0?)
	/usr/local/go/src/net/http/server.go:2294 +0x29`

func putServerHTTP(a pcommon.Map, route, scheme, host string, port int64, status int) {
	a.PutStr("http.request.method", "POST")
	a.PutStr("http.route", route)
	a.PutStr("url.scheme", scheme)
	a.PutStr("url.path", route)
	a.PutStr("server.address", host)
	a.PutInt("server.port", port)
	a.PutInt("http.response.status_code", int64(status))
}

func putClientHTTP(a pcommon.Map, host, path string, status int) {
	a.PutStr("http.request.method", "POST")
	a.PutStr("url.full", "https://"+host+path)
	a.PutStr("server.address", host)
	a.PutInt("server.port", 443)
	if status != 0 {
		a.PutInt("http.response.status_code", int64(status))
	}
}

func putDB(a pcommon.Map, namespace, table, op, query, host string) {
	a.PutStr("db.system.name", "postgresql")
	a.PutStr("db.namespace", namespace)
	a.PutStr("db.collection.name", table)
	a.PutStr("db.operation.name", op)
	a.PutStr("db.query.summary", op+" "+namespace+"."+table)
	a.PutStr("db.query.text", query)
	a.PutStr("server.address", host)
	a.PutInt("server.port", 5432)
}

// documents is the retrieved chunks as JSON, the bulk of a retrieval span.
func (c *tracesCursor) documents() string {
	s, r := &c.skel, c.content
	// A Builder hands its bytes over as the string without copying them.
	var b strings.Builder
	b.Grow(s.docs*700 + 2)
	b.WriteByte('[')
	score := r.between(0.78, 0.93)
	var num [24]byte
	for i := range s.docs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"id":"doc_`)
		b.WriteString(r.hexID(6))
		b.WriteString(`","score":`)
		b.Write(strconv.AppendFloat(num[:0], score, 'f', 4, 64))
		b.WriteString(`,"text":"`)
		b.WriteString(text(r, 350+r.IntN(300)))
		b.WriteString(`"}`)
		score -= r.between(0.005, 0.03)
	}
	b.WriteByte(']')
	return b.String()
}

// inputMessages is gen_ai.input.messages: the system prompt and a user turn
// padded with context to about chars bytes.
func inputMessages(r rng, s *traceSkel, chars int) string {
	sys := systemPrompts[s.user.index%len(systemPrompts)]
	user := text(r, min(chars, maxContentChars)-len(sys))
	return `[{"role":"system","parts":[{"type":"text","content":"` + sys +
		`"}]},{"role":"user","parts":[{"type":"text","content":"` + user + `"}]}]`
}

// outputMessages is gen_ai.output.messages for a completion of about chars
// bytes.
func outputMessages(r rng, chars int, finish string) string {
	return `[{"role":"assistant","parts":[{"type":"text","content":"` + text(r, min(chars, maxContentChars)) +
		`"}],"finish_reason":"` + finish + `"}]`
}
