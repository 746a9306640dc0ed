package coord

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// A failover to a replica that had not received the latest entries keeps the
// stream and its epoch: only the entries are gone. Each collector remembers
// the entries it added lately; when the server holding a stream changes, it
// looks them up, and those neither in the stream nor in the ledger were
// lost.
const (
	// failoverWindow is how far back the entries are remembered: a replica
	// lagging further behind loses entries this does not see.
	failoverWindow = time.Minute
	// failoverTracked bounds the entries remembered per stream.
	failoverTracked = 100_000
	// FailoverGrace is how long a suspect waits, and at least two
	// maintenance ticks, before it is counted lost: a worker that read it
	// before the failover may still be committing it.
	FailoverGrace = 5 * time.Second
)

// addedEntry is an entry this collector added.
type addedEntry struct {
	id, key string
	items   int
	at      time.Time
}

// recentAdds are the entries this collector added to one stream within
// failoverWindow, oldest first.
type recentAdds struct {
	mu   sync.Mutex
	list []addedEntry
	head int
	// cut is when the last entry no longer remembered was added (or
	// forgotten): the list holds every entry added after it.
	cut time.Time
}

func (r *recentAdds) add(e addedEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, e)
	for r.head < len(r.list) && (len(r.list)-r.head > failoverTracked || e.at.Sub(r.list[r.head].at) > failoverWindow) {
		r.cut = r.list[r.head].at
		r.head++
	}
	if r.head > len(r.list)/2 {
		r.list = append(r.list[:0], r.list[r.head:]...)
		r.head = 0
	}
}

// forget drops the entries remembered at now: the stream they were in was
// lost whole, and reported so.
func (r *recentAdds) forget(now time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list, r.head, r.cut = r.list[:0], 0, now
}

// drop forgets the entries of es: reported lost, they are not looked up
// again after a later change of server.
func (r *recentAdds) drop(es []addedEntry) {
	if r == nil {
		return
	}
	gone := make(map[string]bool, len(es))
	for _, e := range es {
		gone[e.id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.list[:r.head]
	for _, e := range r.list[r.head:] {
		if !gone[e.id] {
			kept = append(kept, e)
		}
	}
	r.list = kept
}

// snapshot returns the entries remembered, oldest first (none for a stream
// this collector does not add to: a shard being drained).
func (r *recentAdds) snapshot() []addedEntry {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]addedEntry(nil), r.list[r.head:]...)
}

// since returns the entries added at or after t, and whether they are all
// of them: none added then was forgotten or trimmed.
func (r *recentAdds) since(t time.Time) ([]addedEntry, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []addedEntry
	for _, e := range r.list[r.head:] {
		if !e.at.Before(t) {
			out = append(out, e)
		}
	}
	return out, r.cut.Before(t)
}

// byID returns the entries remembered whose ids are among ids, oldest
// first, and whether every one of ids is.
func (r *recentAdds) byID(ids []string) ([]addedEntry, bool) {
	if r == nil {
		return nil, false
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []addedEntry
	for _, e := range r.list[r.head:] {
		if want[e.id] {
			out = append(out, e)
			delete(want, e.id)
		}
	}
	return out, len(want) == 0
}

// nodeSeen is the server last seen holding a stream, and the stream's epoch
// then: a new epoch means the stream itself was lost (Runtime.reportLoss), not some
// of its entries.
type nodeSeen struct{ runID, epoch string }

// failoverSuspects are entries missing from a stream after its server
// changed, not (yet) in the ledger.
type failoverSuspects struct {
	entries  []addedEntry
	from, to string // the servers' run ids
	since    time.Time
	ticks    int // maintenance ticks waited
}

// auditFailover notices that the server holding s changed and looks up the
// entries this collector added lately; those still neither in the stream nor
// in the ledger FailoverGrace later are reported lost. wholesale says
// that the stream itself was lost (reportLoss said so): nothing to look up.
// node is the server the check read, when known (Sentinel mode); else it is
// asked.
func (rs *Runtime) auditFailover(ctx context.Context, sig string, s *Stream, node string, wholesale bool) {
	stream := s.Keys().Stream
	rs.mu.Lock()
	seen, sus, epoch, away := rs.nodes[stream], rs.suspects[stream], rs.epochs[stream], rs.away[stream]
	rs.mu.Unlock()
	known := seen.runID
	wholesale = wholesale || (known != "" && seen.epoch != epoch)
	if sus != nil {
		sus.ticks++
		if sus.ticks >= 2 && rs.now().Sub(sus.since) >= FailoverGrace {
			rs.decideSuspects(ctx, sig, s, sus)
		}
	}
	var err error
	if node == "" {
		node, err = s.Node(ctx)
	}
	// away: another server answered while the sentinels named this one;
	// what it acknowledged is looked up too.
	if err != nil || (node == known && !wholesale && !away) {
		return
	}
	if wholesale {
		rs.recent[stream].forget(rs.now())
	}
	if known == "" || wholesale {
		rs.mu.Lock()
		delete(rs.suspects, stream)
		delete(rs.away, stream)
		rs.nodes[stream] = nodeSeen{node, epoch}
		rs.mu.Unlock()
		return
	}
	added := rs.recent[stream].snapshot()
	suspects, ok := rs.missing(ctx, s, added)
	if !ok {
		return // the next tick tries again
	}
	rs.logger.Info("the Redis server holding a stream changed (a failover, a restart or a moved slot); the entries this collector added lately were looked up",
		zap.String("redis", rs.addr), zap.String("stream", stream), zap.String("from_run_id", known), zap.String("to_run_id", node),
		zap.Int("entries_looked_up", len(added)), zap.Int("missing_and_not_written", len(suspects)))
	rs.mu.Lock()
	rs.nodes[stream] = nodeSeen{node, epoch}
	delete(rs.away, stream)
	if cur := rs.suspects[stream]; cur != nil {
		// Still open: kept with those found now, under a new grace.
		suspects = mergeEntries(cur.entries, suspects)
		known = cur.from
	}
	if len(suspects) > 0 {
		rs.suspects[stream] = &failoverSuspects{entries: suspects, from: known, to: node, since: rs.now()}
	}
	rs.mu.Unlock()
}

// decideSuspects looks sus up again and reports those still neither in the
// stream nor in the ledger; a failed look-up leaves them for the next tick.
func (rs *Runtime) decideSuspects(ctx context.Context, sig string, s *Stream, sus *failoverSuspects) {
	lost, ok := rs.missing(ctx, s, sus.entries)
	if !ok {
		return
	}
	stream := s.Name()
	rs.mu.Lock()
	if rs.suspects[stream] == sus {
		delete(rs.suspects, stream)
	}
	rs.mu.Unlock()
	if len(lost) > 0 {
		rs.recent[stream].drop(lost)
		rs.reportFailoverLoss(ctx, sig, stream, lost, sus.from, sus.to)
	}
}

// epochTicks is how many maintenance ticks, and at least FailoverGrace, a
// stream's epoch must stay changed or missing before the stream is counted
// lost whole. While a Sentinel failover settles, the client may reach a
// server without the stream (the old primary back empty, still named by a
// sentinel) and then the promoted replica again: the known epoch back means
// the stream was not lost, and the entries this collector added meanwhile
// are looked up as after any change of server.
const epochTicks = 2

// epochChange is a stream whose epoch differs from the one known, not yet
// decided.
type epochChange struct {
	since time.Time
	ticks int
	// last is the backlog last seen with the known epoch: the estimate
	// if the stream turns out lost; lastAt when it was read.
	last   Stats
	lastAt time.Time
	// node is the server last seen without the known epoch.
	node string
	// counted: the entry count reported the loss exactly meanwhile.
	counted bool
}

// epochState is what settleEpoch made of a stream's epoch.
type epochState int

const (
	epochSteady    epochState = iota // the known epoch, or none known yet
	epochUnsettled                   // changed lately: nothing decided, the audit waits
	epochLost                        // changed for good: reported lost whole
)

// settleEpoch compares the epoch st read with the one known. A change is
// held for epochTicks ticks and FailoverGrace, without touching the epochs,
// the adds remembered or the servers seen; the known epoch back within that
// ends it (the audit then looks up the adds since, from the server that
// lacked it); a change that lasts is reported as the stream lost whole, with
// the backlog last seen with the known epoch unless counted (the entry count
// reported it exactly). node is the server st was read from, when known
// (Sentinel mode).
func (rs *Runtime) settleEpoch(ctx context.Context, sig string, s *Stream, node, known string, st Stats, counted bool) epochState {
	stream := s.Name()
	rs.mu.Lock()
	ch := rs.unsettled[stream]
	if known == "" || st.Epoch == known {
		delete(rs.unsettled, stream)
		if ch != nil {
			rs.nodes[stream] = nodeSeen{runID: ch.node, epoch: known}
		}
		rs.mu.Unlock()
		if ch != nil {
			rs.logger.Info("the Redis server holding a stream has its epoch again: a server without the stream answered for a while "+
				"(a failover settling); the stream was not lost, the entries added meanwhile are looked up",
				zap.String("redis", rs.addr), zap.String("stream", stream), zap.String("without_it_run_id", ch.node), zap.Int("checks", ch.ticks))
		}
		return epochSteady
	}
	if ch == nil {
		seen := rs.stats[stream]
		ch = &epochChange{since: rs.now(), last: seen.Stats, lastAt: seen.at, node: "unknown"}
		rs.unsettled[stream] = ch
	}
	ch.ticks++
	ch.counted = ch.counted || counted
	due := ch.ticks >= epochTicks && rs.now().Sub(ch.since) >= FailoverGrace
	if due {
		delete(rs.unsettled, stream)
	}
	sus := rs.suspects[stream]
	rs.mu.Unlock()
	if !due {
		var err error
		if node == "" {
			node, err = s.Node(ctx)
		}
		if err == nil {
			rs.mu.Lock()
			ch.node = node
			rs.mu.Unlock()
		}
		return epochUnsettled
	}
	// Entries found missing after an earlier change of server waited
	// longer than their grace: decided before the stream's adds are
	// forgotten.
	if sus != nil {
		rs.decideSuspects(ctx, sig, s, sus)
	}
	rs.lost(ctx, sig, s, known, st, ch)
	return epochLost
}

// missing returns the entries of es neither in the stream nor, by their
// request keys, in the ledger: the stream first, as an entry leaves it only
// once its rows are committed. Looked up again when the grace ends, an entry
// back in the stream (the client had reached a server without it, and is
// back) is not lost. ok is false when either could not be read.
func (rs *Runtime) missing(ctx context.Context, s *Stream, es []addedEntry) ([]addedEntry, bool) {
	if len(es) == 0 {
		return nil, true
	}
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.id
	}
	present, err := s.Present(ctx, ids)
	if err != nil {
		return nil, false
	}
	var absent []addedEntry
	var keys []string
	for _, e := range es {
		if !present[e.id] {
			absent = append(absent, e)
			keys = append(keys, e.key)
		}
	}
	if len(absent) == 0 {
		return nil, true
	}
	done, err := rs.ledger.Committed(ctx, s.Ledger(), keys)
	if err != nil {
		return nil, false
	}
	var out []addedEntry
	for _, e := range absent {
		if !done[e.key] {
			out = append(out, e)
		}
	}
	return out, true
}

// lostFields are the log fields naming lost entries (at least one): how
// many, their items, and the first and last entry id.
func lostFields(lost []addedEntry) []zap.Field {
	items := 0
	for _, e := range lost {
		items += e.items
	}
	return []zap.Field{zap.Int("lost_entries", len(lost)), zap.Int("lost_items", items),
		zap.String("first_lost_id", lost[0].id), zap.String("last_lost_id", lost[len(lost)-1].id)}
}

// reportFailoverLoss says loudly which entries a failover lost.
func (rs *Runtime) reportFailoverLoss(ctx context.Context, sig, stream string, lost []addedEntry, from, to string) {
	rs.rec.Lost(ctx, sig, int64(len(lost)))
	rs.logger.Error("Redis lost entries in a failover: the server now holding the stream lacks entries this collector added, "+
		"and they are not in PostgreSQL; the requests were acknowledged to clients and are lost. "+
		"Set redis::min_replicas to 1 so that a request is acknowledged only once a replica holds it",
		append([]zap.Field{zap.String("redis", rs.addr), zap.String("signal", sig), zap.String("stream", stream),
			zap.String("from_run_id", from), zap.String("to_run_id", to)}, lostFields(lost)...)...)
}

// mergeEntries returns the entries of a and those of b not in a.
func mergeEntries(a, b []addedEntry) []addedEntry {
	in := make(map[string]bool, len(a))
	for _, e := range a {
		in[e.id] = true
	}
	out := append([]addedEntry(nil), a...)
	for _, e := range b {
		if !in[e.id] {
			out = append(out, e)
		}
	}
	return out
}
