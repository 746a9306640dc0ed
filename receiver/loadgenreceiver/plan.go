package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// The article's traces have 5 to 12 spans.
const (
	minSpansPerTrace = 5
	maxSpansPerTrace = 12
)

// Independent random streams. Each (stream, user, trace) triple seeds its own
// PCG, so one signal can be generated without the others and still point at
// the same trace and span ids, and the data does not depend on batch size or
// concurrency.
const (
	streamPlan uint64 = iota + 1
	streamSkeleton
	streamSpans
	streamMetrics
	streamLogs
	streamSession
)

// workload is what every cursor derives from the config.
type workload struct {
	seed          uint64
	start         int64 // unix ns; users' activity begins up to an hour before it
	spansPerUser  int
	pointsPerUser int
	logsPerUser   int
	batchSize     int
}

func newWorkload(cfg Config, start time.Time) *workload {
	s, p, l := cfg.perUser()
	return &workload{
		seed:          cfg.Seed,
		start:         start.UnixNano(),
		spansPerUser:  s,
		pointsPerUser: p,
		logsPerUser:   l,
		batchSize:     cfg.BatchSize,
	}
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// reseed points src at the stream for (stream, user, trace).
func (w *workload) reseed(src *rand.PCG, stream uint64, user, trace int) {
	h := splitmix64(w.seed)
	h = splitmix64(h ^ stream)
	h = splitmix64(h ^ uint64(user))
	h = splitmix64(h ^ uint64(trace))
	src.Seed(h, splitmix64(h^0xa0761d6478bd642f))
}

// rng is a re-seedable math/rand/v2 generator.
type rng struct {
	src *rand.PCG
	*rand.Rand
}

func newRNG() rng {
	src := rand.NewPCG(0, 0)
	return rng{src: src, Rand: rand.New(src)}
}

// between returns a uniform float64 in [lo, hi).
func (r rng) between(lo, hi float64) float64 { return lo + r.Float64()*(hi-lo) }

// chance reports true with probability p.
func (r rng) chance(p float64) bool { return r.Float64() < p }

func pick[T any](r rng, s []T) T { return s[r.IntN(len(s))] }

// hexID returns n random bytes as lower-case hex.
func (r rng) hexID(n int) string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], r.Uint64())
	binary.LittleEndian.PutUint64(b[8:], r.Uint64())
	return hex.EncodeToString(b[:n])
}

// userPlan is a user's identity and the shape of their day: how many traces,
// how many spans each, and when each starts. Every cursor rebuilds it from
// the plan stream when it reaches the user.
type userPlan struct {
	index       int
	id          string
	team        string
	project     string
	costCenter  string
	client      clientApp
	clientIP    string
	models      [2]int // preferred models in modelCatalog; the first takes 75% of calls
	sessionLen  int    // traces per chat session
	start       int64  // unix ns of the user's first trace
	traceSizes  []int
	traceStarts []int64
}

func (w *workload) planUser(r rng, p *userPlan, user int) {
	w.reseed(r.src, streamPlan, user, 0)
	p.index = user
	p.id = "usr_" + r.hexID(6)
	t := r.IntN(len(teams))
	p.team = teams[t].name
	p.costCenter = teams[t].costCenter
	p.project = pick(r, teams[t].projects)
	p.client = pick(r, clientApps)
	p.clientIP = "10." + strconv.Itoa(16+r.IntN(16)) + "." + strconv.Itoa(r.IntN(256)) + "." + strconv.Itoa(1+r.IntN(254))
	p.models[0] = r.IntN(len(modelCatalog))
	p.models[1] = r.IntN(len(modelCatalog))
	p.sessionLen = 8 + r.IntN(25)
	p.start = w.start - int64(time.Hour) + int64(r.between(0, float64(15*time.Minute)))

	// Split the span share into traces of 5..12 spans that add up exactly.
	p.traceSizes = p.traceSizes[:0]
	for left := w.spansPerUser; left > 0; {
		n := minSpansPerTrace + r.IntN(maxSpansPerTrace-minSpansPerTrace+1)
		switch {
		case left <= maxSpansPerTrace:
			n = left // validation guarantees left >= 5 here
		case left-n < minSpansPerTrace:
			n = left - minSpansPerTrace // leave a whole last trace; 8..11
		}
		p.traceSizes = append(p.traceSizes, n)
		left -= n
	}
	p.traceStarts = slices.Grow(p.traceStarts[:0], len(p.traceSizes))
	at := p.start
	for range p.traceSizes {
		p.traceStarts = append(p.traceStarts, at)
		at += int64(r.between(float64(2*time.Second), float64(35*time.Second)))
	}
}

// share spreads total items over the user's traces as evenly as possible:
// trace t gets total/n, and the first total%n traces one more.
func share(total, traces, t int) int {
	n := total / traces
	if t < total%traces {
		n++
	}
	return n
}

// spanKind is a step of an AI chat request. The order is the order siblings
// run in, so sorting children by kind lays them out in time.
type spanKind uint8

const (
	kindGateway    spanKind = iota // api-gateway SERVER, the root
	kindAuth                       // api-gateway INTERNAL token check
	kindChat                       // chat-service SERVER
	kindCache                      // chat-service CLIENT redis
	kindSessionDB                  // chat-service CLIENT postgresql
	kindRetrieval                  // retrieval-service SERVER
	kindEmbed                      // retrieval-service CLIENT embeddings call
	kindVector                     // retrieval-service CLIENT pgvector search
	kindTool                       // chat-service INTERNAL tool execution
	kindProxy                      // llm-proxy SERVER
	kindModeration                 // llm-proxy CLIENT moderation call
	kindProvider                   // llm-proxy CLIENT chat call to the provider
	kindProvider2                  // llm-proxy CLIENT follow-up chat call
	kindUsage                      // llm-proxy CLIENT postgresql usage insert
	numKinds
)

// kindParent is the kind each kind hangs under.
var kindParent = [numKinds]spanKind{
	kindAuth: kindGateway, kindChat: kindGateway,
	kindCache: kindChat, kindSessionDB: kindChat, kindRetrieval: kindChat, kindTool: kindChat, kindProxy: kindChat,
	kindEmbed: kindRetrieval, kindVector: kindRetrieval,
	kindModeration: kindProxy, kindProvider: kindProxy, kindProvider2: kindProxy, kindUsage: kindProxy,
}

// Every trace has these five spans; optional kinds fill it up to its size.
var (
	coreKinds     = []spanKind{kindGateway, kindChat, kindSessionDB, kindProxy, kindProvider}
	optionalKinds = []spanKind{kindAuth, kindCache, kindRetrieval, kindEmbed, kindVector, kindTool, kindModeration, kindProvider2, kindUsage}
)

// Services, each with a few pods; resources are (service, pod) pairs.
type service uint8

const (
	svcGateway service = iota
	svcChat
	svcRetrieval
	svcProxy
	numServices
)

const podsPerService = 3

var kindService = [numKinds]service{
	kindGateway: svcGateway, kindAuth: svcGateway,
	kindChat: svcChat, kindCache: svcChat, kindSessionDB: svcChat, kindTool: svcChat,
	kindRetrieval: svcRetrieval, kindEmbed: svcRetrieval, kindVector: svcRetrieval,
	kindProxy: svcProxy, kindModeration: svcProxy, kindProvider: svcProxy, kindProvider2: svcProxy, kindUsage: svcProxy,
}

// Failure modes of a trace, drawn once per trace.
type failure uint8

const (
	failNone failure = iota
	failRateLimit
	failServer
	failUnavailable
	failTimeout
	failDB
)

// Per-trace failure probabilities. A provider failure marks 4 spans Error
// (provider call, proxy, chat, gateway) and a database failure 3, so with
// about 8.5 spans a trace this gives about 3% error spans.
const (
	pFailDB       = 0.01
	pFailProvider = 0.06
)

// llmCall is one chat call to a provider, shared by the span, the logs and
// the metrics that describe it.
type llmCall struct {
	inTokens  int
	outTokens int
	cost      float64 // USD
	ttft      float64 // seconds to first token
	dur       int64   // ns
	finish    string
	failed    bool
}

type spanNode struct {
	kind   spanKind
	parent int8 // index in traceSkel.nodes, -1 for the root
	id     pcommon.SpanID
	start  int64
	end    int64
	err    bool
}

// traceSkel is everything about one trace that more than one signal needs:
// ids, tree, timing, the model calls and the failure. It comes from the
// skeleton stream alone, so logs and metrics rebuild it cheaply.
type traceSkel struct {
	user     *userPlan
	index    int
	id       pcommon.TraceID
	session  string
	pod      int
	nodes    [maxSpansPerTrace]spanNode
	n        int
	at       [numKinds]int8 // node index by kind, -1 if absent
	model    int
	calls    [2]llmCall
	numCalls int
	fail     failure
	status   int // HTTP status the gateway returned
	tool     int // index in toolCatalog
	docs     int // chunks retrieved, 0 without retrieval
	embedIn  int // embedding input tokens
	cacheHit bool
}

func (s *traceSkel) node(k spanKind) *spanNode {
	if i := s.at[k]; i >= 0 {
		return &s.nodes[i]
	}
	return nil
}

// sessionID is stable for a run of sessionLen traces of a user.
func (w *workload) sessionID(r rng, p *userPlan, trace int) string {
	w.reseed(r.src, streamSession, p.index, trace/p.sessionLen)
	return "ses_" + r.hexID(8)
}

func (w *workload) skeleton(r rng, p *userPlan, t int, s *traceSkel) {
	s.session = w.sessionID(r, p, t)
	w.reseed(r.src, streamSkeleton, p.index, t)
	s.user, s.index = p, t
	binary.BigEndian.PutUint64(s.id[:8], r.Uint64())
	binary.BigEndian.PutUint64(s.id[8:], r.Uint64()|1) // never the invalid all-zero id
	s.pod = r.IntN(podsPerService)
	for i := range s.at {
		s.at[i] = -1
	}
	s.n = 0
	add := func(k spanKind) {
		parent := int8(-1)
		if k != kindGateway {
			parent = s.at[kindParent[k]]
		}
		nd := &s.nodes[s.n]
		*nd = spanNode{kind: k, parent: parent}
		binary.BigEndian.PutUint64(nd.id[:], r.Uint64()|1)
		s.at[k] = int8(s.n)
		s.n++
	}
	for _, k := range coreKinds {
		add(k)
	}
	size := p.traceSizes[t]
	var cand [numKinds]spanKind
	for s.n < size {
		// Optional kinds whose parent is present and that are not used yet.
		c := cand[:0]
		for _, k := range optionalKinds {
			if s.at[k] < 0 && s.at[kindParent[k]] >= 0 {
				c = append(c, k)
			}
		}
		add(c[r.IntN(len(c))])
	}

	// The model calls.
	s.model = p.models[0]
	if r.chance(0.25) {
		s.model = p.models[1]
	}
	m := &modelCatalog[s.model]
	s.docs, s.embedIn = 0, 0
	if s.at[kindRetrieval] >= 0 {
		s.docs = 4 + r.IntN(9)
		s.embedIn = 8 + r.IntN(120)
	}
	s.tool = r.IntN(len(toolCatalog))
	s.cacheHit = r.chance(0.3)
	s.numCalls = 1
	if s.at[kindProvider2] >= 0 {
		s.numCalls = 2
	}
	prevIn := 0
	for i := 0; i < s.numCalls; i++ {
		c := &s.calls[i]
		// Prompt: system prompt and history, plus retrieved chunks; a
		// follow-up call resends the first exchange.
		c.inTokens = 250 + int(r.ExpFloat64()*800) + s.docs*120 + prevIn
		c.inTokens = min(c.inTokens, 16_000)
		c.outTokens = min(60+int(r.ExpFloat64()*340), 4_000)
		c.ttft = m.ttft * r.between(0.6, 1.8)
		c.dur = int64((c.ttft + float64(c.outTokens)/(m.tokensPerSec*r.between(0.7, 1.3))) * float64(time.Second))
		c.cost = m.cost(c.inTokens, c.outTokens)
		c.finish = "stop"
		if r.chance(0.04) {
			c.finish = "length"
		}
		c.failed = false
		prevIn = c.inTokens + c.outTokens
	}

	// At most one failure per trace; a provider failure hits the last call.
	s.fail, s.status = failNone, 200
	switch f := r.Float64(); {
	case f < pFailDB:
		s.fail, s.status = failDB, 500
	case f < pFailDB+pFailProvider:
		c := &s.calls[s.numCalls-1]
		c.failed, c.outTokens, c.cost, c.finish = true, 0, 0, ""
		switch g := r.Float64(); {
		case g < 0.4:
			s.fail, s.status = failRateLimit, 502
			c.dur = int64(r.between(0.03, 0.3) * float64(time.Second))
		case g < 0.6:
			s.fail, s.status = failServer, 502
			c.dur = int64(r.between(0.2, 2) * float64(time.Second))
		case g < 0.8:
			s.fail, s.status = failUnavailable, 502
			c.dur = int64(r.between(0.05, 1) * float64(time.Second))
		default:
			s.fail, s.status = failTimeout, 504
			c.dur = int64(60 * time.Second)
		}
	}

	w.layout(r, p.traceStarts[t], s)
}

// leafDuration draws how long a span without children takes, in ns.
func (s *traceSkel) leafDuration(r rng, k spanKind) int64 {
	ms := func(lo, hi float64) int64 { return int64(r.between(lo, hi) * float64(time.Millisecond)) }
	switch k {
	case kindAuth:
		return ms(0.5, 4)
	case kindCache:
		return ms(0.2, 3)
	case kindSessionDB:
		if s.fail == failDB {
			return ms(200, 1200) // a lock wait ending in a deadlock
		}
		return ms(1, 12)
	case kindEmbed:
		return ms(40, 260)
	case kindVector:
		return ms(4, 70)
	case kindTool:
		return ms(80, 1500)
	case kindModeration:
		return ms(60, 320)
	case kindProvider:
		return s.calls[0].dur
	case kindProvider2:
		return s.calls[1].dur
	case kindUsage:
		return ms(1, 8)
	}
	return ms(0.5, 3) // a parent's own work
}

// layout gives every span a start and end: children run one after another
// inside their parent, in kind order, so the tree nests properly.
func (w *workload) layout(r rng, start int64, s *traceSkel) {
	var dur [maxSpansPerTrace]int64
	var hasChild [maxSpansPerTrace]bool
	for i := 1; i < s.n; i++ {
		hasChild[s.nodes[i].parent] = true
	}
	// Children have larger indices than parents, so walking backwards sums
	// children before their parent.
	var own [maxSpansPerTrace]int64
	for i := s.n - 1; i >= 0; i-- {
		if !hasChild[i] {
			dur[i] = s.leafDuration(r, s.nodes[i].kind)
		} else {
			own[i] = s.leafDuration(r, numKinds)
			dur[i] += own[i]
		}
		if p := s.nodes[i].parent; p >= 0 {
			dur[p] += dur[i]
		}
	}
	// Spans after a failing database call keep their planned times: a
	// simplification that keeps every trace the planned size.
	s.nodes[0].start = start
	var order [maxSpansPerTrace]int8
	for i := 0; i < s.n; i++ {
		nd := &s.nodes[i] // its start was set when its parent was laid out
		nd.end = nd.start + dur[i]
		kids := order[:0]
		for j := i + 1; j < s.n; j++ {
			if int(s.nodes[j].parent) == i {
				kids = append(kids, int8(j))
			}
		}
		slices.SortFunc(kids, func(a, b int8) int { return int(s.nodes[a].kind) - int(s.nodes[b].kind) })
		at := nd.start + own[i]/2
		for _, j := range kids {
			s.nodes[j].start = at
			at += dur[j]
		}
	}
	// Error status runs from the failing span up to the root.
	var failing spanKind
	switch s.fail {
	case failNone:
		return
	case failDB:
		failing = kindSessionDB
	default:
		failing = kindProvider
		if s.numCalls == 2 {
			failing = kindProvider2
		}
	}
	for i := int(s.at[failing]); i >= 0; i = int(s.nodes[i].parent) {
		s.nodes[i].err = true
	}
}
