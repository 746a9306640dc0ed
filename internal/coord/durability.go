package coord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Durability is how much of what Redis acknowledged survives a crash of the
// Redis process or its host: in Redis mode Redis holds the only copy of an
// acknowledged request until its rows are committed.
type Durability int

// Durability levels, weakest first.
const (
	// DurabilityUnknown: INFO persistence could not be read.
	DurabilityUnknown Durability = iota
	// DurabilityVolatile: no AOF and no RDB snapshots: a restart loses the
	// whole backlog.
	DurabilityVolatile
	// DurabilitySnapshot: RDB snapshots only: a crash loses what was added
	// since the last snapshot.
	DurabilitySnapshot
	// DurabilityAOF: AOF with appendfsync no (the OS decides) or a setting
	// CONFIG GET may not read: a crash of the host loses what the OS had not
	// written.
	DurabilityAOF
	// DurabilityEverySec: AOF fsynced every second: a crash loses about a
	// second.
	DurabilityEverySec
	// DurabilityAlways: AOF fsynced before every reply.
	DurabilityAlways
	// DurabilityReplicated: every entry is confirmed by the required
	// replicas (WAIT) before it is acknowledged, and that many are
	// connected: a failover or the loss of the primary's host loses none.
	DurabilityReplicated
)

func (d Durability) String() string {
	switch d {
	case DurabilityVolatile:
		return "volatile"
	case DurabilitySnapshot:
		return "rdb_snapshots"
	case DurabilityAOF:
		return "aof"
	case DurabilityEverySec:
		return "aof_everysec"
	case DurabilityAlways:
		return "aof_always"
	case DurabilityReplicated:
		return "replicated"
	}
	return "unknown"
}

// Risk says in one line what an acknowledged request risks at this level.
func (d Durability) Risk() string {
	switch d {
	case DurabilityVolatile:
		return "a restart of Redis loses every acknowledged request not yet written to PostgreSQL (the whole backlog)"
	case DurabilitySnapshot:
		return "a crash of Redis loses the acknowledged requests added since its last RDB snapshot"
	case DurabilityAOF:
		return "a crash of the Redis host loses the acknowledged requests its OS had not yet written to disk"
	case DurabilityEverySec:
		return "a crash of the Redis host loses up to about one second of acknowledged requests"
	case DurabilityAlways:
		return "none: every entry is fsynced before Redis acknowledges it"
	case DurabilityReplicated:
		return "a failover loses none: every entry is confirmed by the required replicas; losing the primary and those replicas at once loses what none of them persisted"
	}
	return "unknown: INFO persistence could not be read"
}

// ReadDurability classifies what the server offers from INFO persistence and,
// where this user may run it, CONFIG GET appendfsync and save (managed
// services often refuse CONFIG: then AOF counts as DurabilityAOF and no AOF
// as volatile unless INFO shows a snapshot was taken).
func ReadDurability(ctx context.Context, rdb redis.UniversalClient) (Durability, error) {
	info, err := rdb.Info(ctx, "persistence").Result()
	if err != nil {
		return DurabilityUnknown, fmt.Errorf("info persistence: %w", err)
	}
	fields := infoFields(info)
	if fields["aof_enabled"] == "1" {
		fsync, err := rdb.ConfigGet(ctx, "appendfsync").Result()
		if err != nil {
			return DurabilityAOF, nil
		}
		switch fsync["appendfsync"] {
		case "always":
			return DurabilityAlways, nil
		case "everysec":
			return DurabilityEverySec, nil
		}
		return DurabilityAOF, nil
	}
	save, err := rdb.ConfigGet(ctx, "save").Result()
	if err == nil {
		if strings.TrimSpace(save["save"]) != "" {
			return DurabilitySnapshot, nil
		}
		return DurabilityVolatile, nil
	}
	if n := fields["rdb_saves"]; n != "" && n != "0" {
		return DurabilitySnapshot, nil
	}
	return DurabilityVolatile, nil
}

// ReadDurabilityReplicated is ReadDurability, but DurabilityReplicated when
// each entry waits for minReplicas replicas (minReplicas > 0) and INFO
// replication counts at least that many connected.
//
// On a Redis Cluster it is the weakest of every primary's.
func ReadDurabilityReplicated(ctx context.Context, rdb redis.UniversalClient, minReplicas int) (Durability, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		weakest, seen := DurabilityReplicated, false
		err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			d, err := ReadDurabilityReplicated(ctx, node, minReplicas)
			if err != nil {
				return fmt.Errorf("%s: %w", node.Options().Addr, err)
			}
			mu.Lock()
			defer mu.Unlock()
			weakest, seen = min(weakest, d), true
			return nil
		})
		if err == nil && !seen {
			err = errors.New("no cluster primary is known")
		}
		if err != nil {
			return DurabilityUnknown, err
		}
		return weakest, nil
	}
	d, err := ReadDurability(ctx, rdb)
	if err != nil || minReplicas <= 0 {
		return d, err
	}
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return d, nil
	}
	if n, err := strconv.Atoi(infoFields(info)["connected_slaves"]); err == nil && n >= minReplicas {
		return DurabilityReplicated, nil
	}
	return d, nil
}
