package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

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

// readSentinels asks every sentinel which primary it names (SENTINEL
// MASTER: its run id, as the sentinel last read it) and keeps the one a
// majority name. A sentinel whose primary is down or in a failover names
// none. Called once per maintenance tick, before the shards are checked.
func (rs *Runtime) readSentinels(ctx context.Context) {
	if len(rs.sentinels) == 0 {
		return
	}
	v := askSentinels(ctx, rs.sentinels, rs.cl.masterName)
	rs.mu.Lock()
	rs.sentinelView = v
	rs.mu.Unlock()
}

// askSentinels asks every sentinel of scs which primary it names for
// master, and keeps the one a majority name.
func askSentinels(ctx context.Context, scs []*redis.SentinelClient, master string) sentinelView {
	// All at once: a sentinel out of reach costs its timeout once, not
	// once per sentinel.
	type answer struct {
		m   map[string]string
		err error
	}
	answers := make([]answer, len(scs))
	var wg sync.WaitGroup
	for i, sc := range scs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].m, answers[i].err = sc.Master(ctx, master).Result()
		}()
	}
	wg.Wait()
	votes := map[string]int{}
	answered, refused, replied := 0, 0, 0
	for _, a := range answers {
		m, err := a.m, a.err
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
		if n > len(scs)/2 {
			v.named = id
		}
	}
	return v
}

// namedPrimaryGuard refuses a new connection of the Sentinel client to a
// server that is not the primary a majority of the sentinels name: a
// request acknowledged there (the old primary back empty, while they name
// the promoted replica) would be wiped when it is made a replica. The
// client then dials again, through the sentinels. It accepts whenever the
// sentinels do not positively agree on another server (a failover in
// progress, sentinels out of reach or refusing SENTINEL MASTER), and the
// sentinels' own connections, which go-redis opens with the same hook.
type namedPrimaryGuard struct {
	master    string
	sentinels []*redis.SentinelClient
}

func (g *namedPrimaryGuard) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		// Not readable (an ACL without INFO): the maintenance checks, which
		// need it, say so.
		return nil
	}
	fields := infoFields(info)
	if fields["redis_mode"] == "sentinel" || fields["run_id"] == "" {
		return nil
	}
	// A request waits on this: sentinels out of reach accept the
	// connection after a second rather than hold it.
	ask, cancel := context.WithTimeout(ctx, guardWait)
	defer cancel()
	v := askSentinels(ask, g.sentinels, g.master)
	if v.refused || v.named == "" || v.named == fields["run_id"] {
		return nil
	}
	detail := fmt.Errorf("%w (a new connection reached run id %s, a majority of the sentinels name %s)", ErrNotNamedPrimary, fields["run_id"], v.named)
	// go-redis hands the caller a connection's init error unwrapped once.
	return fmt.Errorf("connection refused: %w", detail)
}

// guardWait bounds how long a new connection waits for the sentinels.
const guardWait = time.Second

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
