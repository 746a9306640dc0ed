package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"math"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// A trace's data points cycle through these kinds, so every user has all
// five point types, all with double values.
const (
	pointInputTokens  = iota // sum: cumulative input tokens
	pointOutputTokens        // sum: cumulative output tokens
	pointCost                // sum: cumulative cost in USD
	pointDuration            // histogram: chat call duration
	pointTTFT                // exponential histogram: time to first token
	pointRateLimit           // gauge: provider rate-limit headroom
	pointTurnLatency         // summary: chat turn latency
	numPointKinds
)

// Metrics in a batch; input and output tokens share one.
const (
	metricTokens = iota
	metricCost
	metricDuration
	metricTTFT
	metricRateLimit
	metricTurnLatency
	numMetrics
)

var pointMetric = [numPointKinds]int{metricTokens, metricTokens, metricCost, metricDuration, metricTTFT, metricRateLimit, metricTurnLatency}

// durationBounds are the semantic conventions' advice for
// gen_ai.client.operation.duration.
var durationBounds = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}

// ttftScale gives exponential buckets 2^(1/16) wide, about 4.4%.
const ttftScale = 4

// recentTurns is the summary's sliding window.
const recentTurns = 20

// metricsCursor makes the data points. Cumulative sums and the summary carry
// state across a user's traces, so it visits every trace, even those that
// get no points.
type metricsCursor struct {
	walker
	content rng
	total   int64

	// The current user's cumulative state.
	tokens   [][2]float64 // by model: input, output
	cost     []float64    // by model
	turns    int
	turnSum  float64
	recent   [recentTurns]float64
	base     int // points of this user before the current trace
	nextBase int

	md      pmetric.Metrics
	n       int
	metrics [numMetrics][podsPerService]pmetric.Metric
	has     [numMetrics][podsPerService]bool
	scopes  [numServices][podsPerService]pmetric.MetricSlice
	hasRes  [numServices][podsPerService]bool
	quant   []float64
}

func newMetricsCursor(w *workload, users userRange) *metricsCursor {
	c := &metricsCursor{
		walker:  newWalker(w, users),
		content: newRNG(),
		tokens:  make([][2]float64, len(modelCatalog)),
		cost:    make([]float64, len(modelCatalog)),
	}
	c.total = users.count() * int64(w.pointsPerUser)
	return c
}

func (c *metricsCursor) perTrace(t int) int {
	return share(c.w.pointsPerUser, len(c.plan.traceSizes), t)
}

func (c *metricsCursor) onUser() {
	clear(c.tokens)
	clear(c.cost)
	c.turns, c.turnSum, c.base, c.nextBase = 0, 0, 0, 0
}

func (c *metricsCursor) onTrace() {
	c.w.reseed(c.content.src, streamMetrics, c.plan.index, c.trace)
	c.base = c.nextBase
	c.nextBase += c.items
	s := &c.skel
	for i := range s.numCalls {
		if call := &s.calls[i]; !call.failed {
			c.tokens[s.model][0] += float64(call.inTokens)
			c.tokens[s.model][1] += float64(call.outTokens)
			c.cost[s.model] += call.cost
		}
	}
	root := &s.nodes[0]
	d := float64(root.end-root.start) / 1e9
	c.recent[c.turns%recentTurns] = d
	c.turns++
	c.turnSum += d
}

// next returns up to batch_size data points and how many there are.
func (c *metricsCursor) next() (pmetric.Metrics, int) {
	c.md, c.n = pmetric.NewMetrics(), 0
	c.has = [numMetrics][podsPerService]bool{}
	c.hasRes = [numServices][podsPerService]bool{}
	for c.n < c.w.batchSize && c.advance(c.perTrace, c.onUser, c.onTrace) {
		c.addPoint((c.base + c.item) % numPointKinds)
		c.item++
		c.n++
	}
	return c.md, c.n
}

// metric returns the current pod's metric of a kind in this batch.
func (c *metricsCursor) metric(kind int) pmetric.Metric {
	mi, pod := pointMetric[kind], c.skel.pod
	if c.has[mi][pod] {
		return c.metrics[mi][pod]
	}
	svc := svcProxy
	if mi == metricTurnLatency {
		svc = svcChat
	}
	if !c.hasRes[svc][pod] {
		rm := c.md.ResourceMetrics().AppendEmpty()
		fillResource(rm.Resource().Attributes(), svc, pod)
		sm := rm.ScopeMetrics().AppendEmpty()
		fillScope(sm.Scope(), svc)
		c.scopes[svc][pod], c.hasRes[svc][pod] = sm.Metrics(), true
	}
	m := c.scopes[svc][pod].AppendEmpty()
	switch mi {
	case metricTokens:
		m.SetName("gen_ai.client.token.usage.total")
		m.SetUnit("{token}")
		m.SetDescription("Tokens used by chat calls, by token type.")
		s := m.SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	case metricCost:
		m.SetName("gen_ai.client.cost")
		m.SetUnit("USD")
		m.SetDescription("Cost of chat calls at list prices.")
		s := m.SetEmptySum()
		s.SetIsMonotonic(true)
		s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	case metricDuration:
		m.SetName("gen_ai.client.operation.duration")
		m.SetUnit("s")
		m.SetDescription("GenAI operation duration.")
		m.SetEmptyHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	case metricTTFT:
		m.SetName("gen_ai.server.time_to_first_token")
		m.SetUnit("s")
		m.SetDescription("Time to generate the first token of a response.")
		m.SetEmptyExponentialHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	case metricRateLimit:
		m.SetName("llm_proxy.rate_limit.remaining_tokens")
		m.SetUnit("{token}")
		m.SetDescription("Tokens left in the provider's per-minute limit.")
		m.SetEmptyGauge()
	case metricTurnLatency:
		m.SetName("chat.turn.duration")
		m.SetUnit("s")
		m.SetDescription("Chat turn latency over the user's last 20 turns.")
		m.SetEmptySummary()
	}
	c.metrics[mi][pod], c.has[mi][pod] = m, true
	return m
}

func (c *metricsCursor) putUser(a pcommon.Map) {
	p := &c.plan
	a.PutStr("user.id", p.id)
	a.PutStr("team", p.team)
	a.PutStr("project", p.project)
	a.PutStr("cost_center", p.costCenter)
}

func (c *metricsCursor) putModel(a pcommon.Map) {
	m := &modelCatalog[c.skel.model]
	a.PutStr("gen_ai.operation.name", "chat")
	a.PutStr("gen_ai.provider.name", m.provider)
	a.PutStr("gen_ai.request.model", m.request)
	a.PutStr("server.address", m.host)
}

func (c *metricsCursor) addPoint(kind int) {
	s, p, r := &c.skel, &c.plan, c.content
	root := &s.nodes[0]
	now := pcommon.Timestamp(root.end)
	m := c.metric(kind)
	switch kind {
	case pointInputTokens, pointOutputTokens, pointCost:
		dp := m.Sum().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.Timestamp(p.start))
		dp.SetTimestamp(now)
		a := dp.Attributes()
		a.EnsureCapacity(9)
		c.putUser(a)
		c.putModel(a)
		switch kind {
		case pointInputTokens:
			a.PutStr("gen_ai.token.type", "input")
			dp.SetDoubleValue(c.tokens[s.model][0])
		case pointOutputTokens:
			a.PutStr("gen_ai.token.type", "output")
			dp.SetDoubleValue(c.tokens[s.model][1])
		default:
			dp.SetDoubleValue(c.cost[s.model])
		}
	case pointDuration:
		dp := m.Histogram().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.Timestamp(root.start))
		dp.SetTimestamp(now)
		a := dp.Attributes()
		a.EnsureCapacity(9)
		c.putUser(a)
		c.putModel(a)
		if s.fail != failNone && s.fail != failDB {
			a.PutStr("error.type", failureType[s.fail])
		}
		dp.ExplicitBounds().FromRaw(durationBounds)
		counts := make([]uint64, len(durationBounds)+1)
		lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
		for i := range s.numCalls {
			v := float64(s.calls[i].dur) / 1e9
			counts[bucketOf(durationBounds, v)]++
			lo, hi, sum = min(lo, v), max(hi, v), sum+v
		}
		dp.BucketCounts().FromRaw(counts)
		dp.SetCount(uint64(s.numCalls))
		dp.SetSum(sum)
		dp.SetMin(lo)
		dp.SetMax(hi)
	case pointTTFT:
		dp := m.ExponentialHistogram().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.Timestamp(root.start))
		dp.SetTimestamp(now)
		a := dp.Attributes()
		a.EnsureCapacity(8)
		c.putUser(a)
		c.putModel(a)
		dp.SetScale(ttftScale)
		var vals [2]float64
		n := 0
		for i := range s.numCalls {
			if !s.calls[i].failed {
				vals[n] = s.calls[i].ttft
				n++
			}
		}
		fillExpHistogram(dp, vals[:n]) // a failed-only trace gives an empty point
	case pointRateLimit:
		dp := m.Gauge().DataPoints().AppendEmpty()
		dp.SetTimestamp(now)
		a := dp.Attributes()
		a.EnsureCapacity(3)
		mod := &modelCatalog[s.model]
		a.PutStr("gen_ai.provider.name", mod.provider)
		a.PutStr("gen_ai.request.model", mod.request)
		a.PutStr("llm_proxy.virtual_key", "vk_"+p.team+"_"+p.project)
		const limit = 2_000_000
		used := limit * math.Pow(r.Float64(), 2) // mostly plenty of headroom
		if s.fail == failRateLimit {
			used = limit * r.between(0.995, 1)
		}
		dp.SetDoubleValue(math.Round(limit - used))
	case pointTurnLatency:
		dp := m.Summary().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(pcommon.Timestamp(p.start))
		dp.SetTimestamp(now)
		a := dp.Attributes()
		a.EnsureCapacity(5)
		c.putUser(a)
		a.PutStr("app.name", p.client.name)
		dp.SetCount(uint64(c.turns))
		dp.SetSum(c.turnSum)
		c.quant = append(c.quant[:0], c.recent[:min(c.turns, recentTurns)]...)
		slices.Sort(c.quant)
		dp.QuantileValues().EnsureCapacity(5)
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 1} {
			qv := dp.QuantileValues().AppendEmpty()
			qv.SetQuantile(q)
			qv.SetValue(c.quant[int(math.Round(q*float64(len(c.quant)-1)))])
		}
	}
}

// bucketOf is the explicit-bucket index of v: buckets are (b[i-1], b[i]].
func bucketOf(bounds []float64, v float64) int {
	i, _ := slices.BinarySearch(bounds, v)
	return i
}

// fillExpHistogram records positive values at ttftScale.
func fillExpHistogram(dp pmetric.ExponentialHistogramDataPoint, vals []float64) {
	if len(vals) == 0 {
		return
	}
	idx := func(v float64) int32 {
		// Bucket i holds (base^i, base^(i+1)], base = 2^(2^-scale).
		return int32(math.Ceil(math.Log2(v)*(1<<ttftScale))) - 1
	}
	lo, hi := int32(math.MaxInt32), int32(math.MinInt32)
	sum, vmin, vmax := 0.0, math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		i := idx(v)
		lo, hi = min(lo, i), max(hi, i)
		sum, vmin, vmax = sum+v, min(vmin, v), max(vmax, v)
	}
	counts := make([]uint64, hi-lo+1)
	for _, v := range vals {
		counts[idx(v)-lo]++
	}
	dp.Positive().SetOffset(lo)
	dp.Positive().BucketCounts().FromRaw(counts)
	dp.SetCount(uint64(len(vals)))
	dp.SetSum(sum)
	dp.SetMin(vmin)
	dp.SetMax(vmax)
}
