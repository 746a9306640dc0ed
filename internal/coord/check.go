package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// probeSignal names the keys the start check writes, under key_prefix like
// the streams' (an ACL that covers the prefix covers them).
const probeSignal = "probe"

// check checks at start what PostgreSQL's start checks: that Redis accepts
// the credentials and lets this user run the commands the exporter uses. A
// refusal fails the start with the fix; an unreachable Redis does not (the
// flush workers wait for it), and is logged once.
func (rs *Runtime) check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, startAttempt)
	defer cancel()
	user := rs.cl.user
	where := fmt.Sprintf("%s (user %q)", rs.addr, user)
	err := rs.rdb.Ping(cctx).Err()
	if err == nil {
		var denied []string
		denied, err = probeCommands(cctx, rs.rdb, rs.cfg.KeyPrefix)
		if len(denied) > 0 {
			return rs.cl.redact(fmt.Errorf("postgrescopy: %s lacks Redis permissions the exporter needs: %s; grant them, e.g. "+
				"ACL SETUSER %s +@connection +@stream +@string +@scripting +@transaction ~{%s:*",
				where, strings.Join(denied, "; "), user, rs.cfg.KeyPrefix))
		}
	}
	if err == nil {
		if err := rs.checkEviction(cctx); err != nil {
			return err
		}
		return rs.logDurability(cctx)
	}
	if Classify(err) == KindAuth {
		return rs.cl.redact(fmt.Errorf("postgrescopy: %s refused the credentials: %w; set redis::username and redis::password "+
			"(or the endpoint URL's user and password; redis::sentinel::username and ::password for the sentinels) to a user this Redis accepts", where, err))
	}
	rs.logger.Warn("Redis is not reachable yet; flush workers wait for it in the background, requests are refused meanwhile",
		zap.String("redis", rs.addr), zap.Error(rs.cl.redact(rs.cl.explain(err))))
	return nil
}

// probeCommands runs the exporter's commands against probe keys and returns
// the refusals, one per command refused. Errors other than refusals (the
// probe keys' state) are ignored, except a connection failure, returned.
func probeCommands(ctx context.Context, rdb redis.UniversalClient, prefix string) ([]string, error) {
	keys := KeysFor(prefix, probeSignal)
	const consumer = "postgrescopy-probe"
	s := NewStream(rdb, keys, Bounds{MaxBytes: 1 << 40, MaxEntries: 1 << 30}, consumer)
	defer func() {
		// Best effort: DEL is not a command the exporter otherwise needs.
		_ = rdb.Del(context.WithoutCancel(ctx), keys.Stream, keys.Bytes, keys.Count, keys.Epoch).Err()
	}()
	var id, txID string
	steps := []struct {
		name string
		run  func() error
	}{
		{"XGROUP CREATE", func() error {
			return rdb.XGroupCreateMkStream(ctx, keys.Stream, keys.Group, "0").Err()
		}},
		{"SET", func() error { return rdb.SetNX(ctx, keys.Epoch, "probe", time.Minute).Err() }},
		{"GET", func() error { return rdb.Get(ctx, keys.Epoch).Err() }},
		{"INCRBY", func() error { return rdb.IncrBy(ctx, keys.Bytes, 0).Err() }},
		{"DECRBY", func() error { return rdb.DecrBy(ctx, keys.Bytes, 0).Err() }},
		{"XADD", func() error {
			var err error
			id, err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: keys.Stream, Values: []any{"d", "", "n", 0}}).Result()
			return err
		}},
		{"MULTI/EXEC", func() error {
			var err error
			txID, err = s.AddEntry(ctx, "probe", "probe", nil, 0)
			return err
		}},
		{"XLEN", func() error { return rdb.XLen(ctx, keys.Stream).Err() }},
		{"XREADGROUP", func() error { _, err := s.ReadNew(ctx, 2, time.Millisecond); return err }},
		{"XAUTOCLAIM", func() error { _, err := s.Claim(ctx, time.Hour, 1); return err }},
		{"XPENDING", func() error { return rdb.XPending(ctx, keys.Stream, keys.Group).Err() }},
		{"XINFO CONSUMERS", func() error { return rdb.XInfoConsumers(ctx, keys.Stream, keys.Group).Err() }},
		{"XACK", func() error { return rdb.XAck(ctx, keys.Stream, keys.Group, "0-1").Err() }},
		{"XDEL", func() error { return rdb.XDel(ctx, keys.Stream, "0-1").Err() }},
		{"EVAL", func() error { return rdb.Eval(ctx, "return 1", []string{keys.Stream}).Err() }},
		{"EVALSHA and the ack script (XACK, XDEL, DECRBY, SET)", func() error {
			entries := []Entry{{ID: "0-1"}}
			for _, id := range []string{id, txID} {
				if id != "" {
					entries = append(entries, Entry{ID: id})
				}
			}
			return s.Ack(ctx, entries)
		}},
		{"XGROUP DELCONSUMER", func() error {
			return rdb.XGroupDelConsumer(ctx, keys.Stream, keys.Group, consumer).Err()
		}},
	}
	var denied []string
	for _, st := range steps {
		err := st.run()
		switch {
		case err == nil || IsNil(err):
		case Classify(err) == KindPermission:
			denied = append(denied, fmt.Sprintf("%s refused (%s)", st.name, redisMessage(err)))
		case !IsReply(err):
			return denied, err
		}
	}
	return denied, nil
}

// redisMessage is the reply of err without the wrapping of coord's errors.
func redisMessage(err error) string {
	var re redis.Error
	if errors.As(err, &re) {
		return re.Error()
	}
	return err.Error()
}

// logDurability says at start what an acknowledged request risks with this
// Redis: until its rows are committed, Redis holds the only copy. Below
// redis::require_durability it returns the error that fails the start.
func (rs *Runtime) logDurability(ctx context.Context) error {
	d, err := ReadDurabilityReplicated(ctx, rs.rdb, rs.cfg.MinReplicas)
	rs.setDurability(d, err)
	fields := []zap.Field{zap.String("redis", rs.addr), zap.String("durability", d.String()), zap.String("risk", d.Risk())}
	switch {
	case err != nil:
		rs.logger.Warn("cannot read Redis persistence settings; what an acknowledged request risks is unknown",
			append(fields, zap.Error(err))...)
	case d >= DurabilityAlways:
		rs.logger.Info("Redis persistence", fields...)
	default:
		rs.logger.Warn("Redis persistence does not keep every acknowledged request through a crash; "+
			"use appendonly yes with appendfsync always, or replicas and redis::min_replicas, for none lost", fields...)
	}
	return rs.belowRequired(d, err)
}

// setDurability records what was read, for the gauge; a failed read leaves
// the last value.
func (rs *Runtime) setDurability(d Durability, err error) (was Durability, changed bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if err != nil {
		return rs.durability, false
	}
	was, changed = rs.durability, rs.durabilityRead && rs.durability != d
	rs.durability, rs.durabilityRead = d, true
	return was, changed
}

// belowRequired says what is wrong when d (read with err) is below
// redis::require_durability, and how to fix it.
func (rs *Runtime) belowRequired(d Durability, err error) error {
	want := rs.cfg.RequireDurability
	if want == DurabilityUnknown || (err == nil && d >= want) {
		return nil
	}
	fix := "set appendonly yes and appendfsync everysec on that Redis (redis.conf, or CONFIG SET then CONFIG REWRITE)"
	switch want {
	case DurabilityAlways:
		fix = "set appendonly yes and appendfsync always on that Redis (redis.conf, or CONFIG SET then CONFIG REWRITE)"
	case DurabilityReplicated:
		fix = fmt.Sprintf("give that Redis at least redis::min_replicas (%d) connected replicas", rs.cfg.MinReplicas)
	}
	if err != nil {
		return fmt.Errorf("postgrescopy: redis::require_durability is %q but the persistence settings of %s cannot be read: %w; "+
			"let this user run INFO persistence and CONFIG GET, or lower redis::require_durability", rs.cfg.RequireDurabilityName, rs.addr, err)
	}
	return fmt.Errorf("postgrescopy: redis::require_durability is %q but %s offers %q (%s); "+
		"%s, or lower redis::require_durability",
		rs.cfg.RequireDurabilityName, rs.addr, d.String(), d.Risk(), fix)
}

// rereadDurability re-reads the durability while running, logs a change
// and, when it fell below redis::require_durability, says so as an error:
// requests are still acknowledged (refusing them all would lose them too).
func (rs *Runtime) rereadDurability(ctx context.Context) {
	d, err := ReadDurabilityReplicated(ctx, rs.rdb, rs.cfg.MinReplicas)
	was, changed := rs.setDurability(d, err)
	if err != nil && ctx.Err() == nil {
		rs.logger.Debug("re-reading Redis persistence settings failed", zap.Error(err))
	}
	if !changed {
		return
	}
	fields := []zap.Field{zap.String("redis", rs.addr), zap.String("durability", d.String()),
		zap.String("was", was.String()), zap.String("risk", d.Risk())}
	if below := rs.belowRequired(d, nil); below != nil {
		rs.logger.Error("Redis persistence changed below redis::require_durability", append(fields, zap.Error(below))...)
		return
	}
	if d < was {
		rs.logger.Warn("Redis persistence changed", fields...)
		return
	}
	rs.logger.Info("Redis persistence changed", fields...)
}

// checkEviction refuses a Redis whose maxmemory-policy may evict the
// exporter's keys: an evicted stream is every acknowledged request it held,
// lost, and eviction starts exactly when a backlog fills the memory. An
// unreadable policy is left to the periodic re-read.
func (rs *Runtime) checkEviction(ctx context.Context) error {
	m, err := ReadMemory(ctx, rs.rdb)
	if err != nil {
		rs.logger.Debug("cannot read Redis maxmemory-policy", zap.Error(err))
		return nil
	}
	rs.setMemory(m)
	if m.Evicts() {
		return fmt.Errorf("postgrescopy: %s evicts keys at maxmemory (maxmemory-policy %s, maxmemory %d bytes%s): "+
			"it would delete the streams that hold acknowledged requests; set maxmemory-policy noeviction on that Redis "+
			"(or a volatile-* policy: the exporter's keys have no TTL), e.g. CONFIG SET maxmemory-policy noeviction then CONFIG REWRITE",
			rs.addr, m.Policy, m.MaxBytes, nodeSuffix(m))
	}
	return nil
}

func nodeSuffix(m Memory) string {
	if m.Addr == "" {
		return ""
	}
	return ", on " + m.Addr
}

// setMemory records the memory settings read and whether the policy
// changed from an earlier read.
func (rs *Runtime) setMemory(m Memory) (was Memory, changed bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	was, changed = rs.memory, rs.memoryRead && rs.memory.Policy != m.Policy
	rs.memory, rs.memoryRead = m, true
	return was, changed
}

// rereadEviction re-reads maxmemory-policy while running: a policy changed
// to an evicting one is said as an error (requests are still acknowledged;
// the entry counts report what eviction deletes).
func (rs *Runtime) rereadEviction(ctx context.Context) {
	m, err := ReadMemory(ctx, rs.rdb)
	if err != nil {
		return
	}
	was, changed := rs.setMemory(m)
	if !changed {
		return
	}
	fields := []zap.Field{zap.String("redis", rs.addr), zap.String("maxmemory_policy", m.Policy),
		zap.String("was", was.Policy), zap.Int64("maxmemory", m.MaxBytes)}
	if m.Addr != "" {
		fields = append(fields, zap.String("node", m.Addr))
	}
	if m.Evicts() {
		rs.logger.Error("Redis maxmemory-policy changed to one that evicts keys: at maxmemory it deletes streams holding acknowledged requests; "+
			"set maxmemory-policy noeviction", fields...)
		return
	}
	rs.logger.Info("Redis maxmemory-policy changed", fields...)
}
