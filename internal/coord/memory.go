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

// Memory is a Redis server's memory limit and what it does at the limit.
type Memory struct {
	MaxBytes int64  // maxmemory; 0 is no limit
	Policy   string // maxmemory-policy
	Addr     string // the server, on a cluster (empty elsewhere)
}

// Evicts reports whether the policy may delete the exporter's keys to make
// room: the allkeys-* policies. The volatile-* ones evict only keys with a
// TTL, and the exporter sets none (with no such key left they refuse writes,
// as noeviction does).
func (m Memory) Evicts() bool { return strings.HasPrefix(m.Policy, "allkeys-") }

// readMemory reads INFO memory, which managed services that refuse CONFIG
// still answer.
func readMemory(ctx context.Context, node redis.Cmdable) (Memory, error) {
	info, err := node.Info(ctx, "memory").Result()
	if err != nil {
		return Memory{}, fmt.Errorf("info memory: %w", err)
	}
	f := infoFields(info)
	m := Memory{Policy: f["maxmemory_policy"]}
	m.MaxBytes, _ = strconv.ParseInt(f["maxmemory"], 10, 64)
	if m.Policy == "" {
		return m, errors.New("info memory: no maxmemory_policy")
	}
	return m, nil
}

// ReadMemory reads the memory settings of the server rdb writes to; on a
// Redis Cluster those of an evicting primary when one is, else of a primary.
func ReadMemory(ctx context.Context, rdb redis.UniversalClient) (Memory, error) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return readMemory(ctx, rdb)
	}
	var mu sync.Mutex
	var found Memory
	seen := false
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		m, err := readMemory(ctx, node)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		m.Addr = node.Options().Addr
		mu.Lock()
		defer mu.Unlock()
		if !seen || m.Evicts() && !found.Evicts() {
			found, seen = m, true
		}
		return nil
	})
	if err == nil && !seen {
		err = errors.New("no cluster primary is known")
	}
	return found, err
}

// Memory reads the memory settings of the server holding the stream.
func (s *Stream) Memory(ctx context.Context) (Memory, error) {
	primary, err := s.slotPrimary(ctx)
	if err != nil {
		return Memory{}, err
	}
	if primary != nil {
		m, err := readMemory(ctx, primary)
		m.Addr = primary.Options().Addr
		return m, err
	}
	return readMemory(ctx, s.rdb)
}
