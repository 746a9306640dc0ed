package coord

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// throwawayRedis starts a redis-server of its own with args (the machine's
// Redis is never reconfigured) and returns a client of it.
func throwawayRedis(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	return redistest.Client(t, redistest.Start(t, "", args...))
}

func TestReadDurability(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want Durability
	}{
		{"no persistence", []string{"--save", "", "--appendonly", "no"}, DurabilityVolatile},
		{"rdb snapshots", []string{"--save", "3600 1", "--appendonly", "no"}, DurabilitySnapshot},
		{"aof no fsync", []string{"--save", "", "--appendonly", "yes", "--appendfsync", "no"}, DurabilityAOF},
		{"aof everysec", []string{"--save", "", "--appendonly", "yes", "--appendfsync", "everysec"}, DurabilityEverySec},
		{"aof always", []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}, DurabilityAlways},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := throwawayRedis(t, tc.args...)
			got, err := ReadDurability(context.Background(), rdb)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "%s: %s", got, got.Risk())
		})
	}
}

// A user that may not run CONFIG (as on managed services) still gets a
// classification from INFO alone, never a stronger one than the server has.
func TestReadDurabilityWithoutConfig(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		args []string
		want Durability
	}{
		{"aof always", []string{"--save", "", "--appendonly", "yes", "--appendfsync", "always"}, DurabilityAOF},
		{"no persistence", []string{"--save", "", "--appendonly", "no"}, DurabilityVolatile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin := throwawayRedis(t, tc.args...)
			require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "writer", "on", ">pw", "+@all", "-config", "~*").Err())
			rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr, Username: "writer", Password: "pw"})
			defer rdb.Close()
			require.Error(t, rdb.ConfigGet(ctx, "appendfsync").Err(), "the user must not be allowed CONFIG")
			got, err := ReadDurability(ctx, rdb)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestWaitAOFOnlyFrom72WithAOF: WAITAOF exists from Redis 7.2, and counts
// replicas that fsynced their AOF; below, or without an AOF, AddEntry uses
// WAIT. (This machine's Redis is 7.0: the WAITAOF path itself runs only
// against a 7.2+ server.)
func TestWaitAOFOnlyFrom72WithAOF(t *testing.T) {
	info := func(version, aof string) string {
		return "# Server\r\nredis_version:" + version + "\r\nredis_mode:standalone\r\n# Persistence\r\naof_enabled:" + aof + "\r\n"
	}
	for _, c := range []struct {
		version, aof string
		want         bool
	}{
		{"7.0.15", "1", false},
		{"7.2.0", "1", true},
		{"7.4.1", "1", true},
		{"8.0.2", "1", true},
		{"7.2.4", "0", false},
		{"6.2.14", "1", false},
		{"", "1", false},
	} {
		if got := WaitAOFSupported(info(c.version, c.aof)); got != c.want {
			t.Errorf("redis %q aof_enabled:%s: WaitAOFSupported = %v, want %v", c.version, c.aof, got, c.want)
		}
	}
}
