package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// In Sentinel mode the client may reach a server that is not the primary
// the sentinels name: go-redis follows one sentinel's answer, and while a
// failover settles a sentinel may still name the old primary's address,
// where it is back empty, a primary of its own. What that server holds, or
// lacks, says nothing about what was lost: the loss audit decides nothing
// while the server reached is not the one a majority of the sentinels
// name, and the requests are refused meanwhile rather than acknowledged into
// a server about to be made a replica (and wiped).

// ErrNotNamedPrimary: the Redis server the client reaches is not the
// primary a majority of the sentinels name; the request was not added.
// Retryable: the client follows the sentinels within a few seconds.
var ErrNotNamedPrimary = errors.New("the Redis server reached is not the primary the sentinels name (a failover settling)")

// sentinelView is what the sentinels said at the last maintenance tick.
type sentinelView struct {
	// named is the run id of the primary a majority of the sentinels name,
	// "" when no majority names one (unanswered, a failover in progress,
	// the primary down or its run id not read yet).
	named string
	// answered counts the sentinels that named an up primary.
	answered int
	// refused: every sentinel that answered refused SENTINEL MASTER (an
	// ACL user limited to what go-redis asks): nothing to compare with,
	// the audit runs as without sentinels.
	refused bool
}

// newSentinelClients are the clients of cl's sentinels (none outside
// Sentinel mode).
func newSentinelClients(cl *Client) []*redis.SentinelClient {
	var out []*redis.SentinelClient
	for _, o := range cl.sentinelOpts {
		out = append(out, redis.NewSentinelClient(o))
	}
	return out
}

// readSentinels asks every sentinel which primary it names (SENTINEL
// MASTER: its run id, as the sentinel last read it) and keeps the one a
// majority name. A sentinel whose primary is down or in a failover names
// none. Called once per maintenance tick, before the shards are checked.
func (rs *Runtime) readSentinels(ctx context.Context) {
	if len(rs.sentinels) == 0 {
		return
	}
	votes := map[string]int{}
	answered, refused, replied := 0, 0, 0
	for _, sc := range rs.sentinels {
		m, err := sc.Master(ctx, rs.cl.masterName).Result()
		if err != nil {
			if IsReply(err) {
				replied++
				if Classify(err) == KindPermission {
					refused++
				}
			}
			continue
		}
		replied++
		flags := m["flags"]
		if m["runid"] == "" || strings.Contains(flags, "s_down") || strings.Contains(flags, "o_down") || strings.Contains(flags, "failover") {
			continue
		}
		answered++
		votes[m["runid"]]++
	}
	v := sentinelView{answered: answered, refused: replied > 0 && refused == replied}
	for id, n := range votes {
		if n > len(rs.sentinels)/2 {
			v.named = id
		}
	}
	rs.mu.Lock()
	rs.sentinelView = v
	rs.mu.Unlock()
}

// reachesNamedPrimary says whether node, the run id of the server a shard
// reaches, is the primary a majority of the sentinels name (always true
// outside Sentinel mode). It sets whether Enqueue refuses: only when a
// majority positively name another server, so that sentinels out of reach
// refuse nothing. A change is logged once.
func (rs *Runtime) reachesNamedPrimary(stream, node string) bool {
	if len(rs.sentinels) == 0 {
		return true
	}
	rs.mu.Lock()
	v := rs.sentinelView
	said := rs.sentinelRefusalSaid
	rs.sentinelRefusalSaid = v.refused
	rs.mu.Unlock()
	if v.refused {
		if !said {
			rs.logger.Warn("the sentinels refuse SENTINEL MASTER to redis::sentinel::username: the loss audit cannot tell whether the server reached "+
				"is the primary they name, and may report a loss while a failover settles; allow +sentinel|master to that user",
				zap.String("redis", rs.addr))
		}
		rs.refusing.Store(false)
		return true
	}
	ok := v.named != "" && v.named == node
	refuse := v.named != "" && v.named != node
	was := rs.refusing.Swap(refuse)
	rs.mu.Lock()
	waited := rs.waiting[stream]
	if ok {
		delete(rs.waiting, stream)
	} else if !waited {
		rs.waiting[stream] = true
	}
	rs.mu.Unlock()
	switch {
	case !ok && !waited:
		rs.logger.Warn("the Redis server reached is not the primary a majority of the sentinels name (a failover settling, or sentinels out of reach); "+
			"the loss audit decides nothing until they agree",
			zap.String("redis", rs.addr), zap.String("stream", stream), zap.String("reached_run_id", node),
			zap.String("named_run_id", v.named), zap.Int("sentinels_naming_an_up_primary", v.answered), zap.Int("sentinels", len(rs.sentinels)),
			zap.Bool("requests_refused", refuse))
	case ok && waited:
		rs.logger.Info("the Redis server reached is the primary the sentinels name again; the loss audit resumes",
			zap.String("redis", rs.addr), zap.String("stream", stream), zap.String("run_id", node))
	case refuse && !was:
		rs.logger.Warn("a majority of the sentinels name another primary than the server reached; requests are refused until the client follows them",
			zap.String("redis", rs.addr), zap.String("reached_run_id", node), zap.String("named_run_id", v.named))
	}
	return ok
}

// refusal is Enqueue's error while the server reached is not the primary the
// sentinels name.
func (rs *Runtime) refusal() error {
	if !rs.refusing.Load() {
		return nil
	}
	return fmt.Errorf("%s: not acknowledged: %w; retrying", rs.addr, ErrNotNamedPrimary)
}

// closeSentinels closes the sentinels' clients.
func (rs *Runtime) closeSentinels() {
	for _, sc := range rs.sentinels {
		_ = sc.Close()
	}
}
