package coord

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// addLuaScript is the former Add, which passed the payload through Lua; kept
// here only as the baseline of BenchmarkAdd.
var addLuaScript = redis.NewScript(`
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local size = tonumber(ARGV[4])
local maxBytes = tonumber(ARGV[1])
if maxBytes > 0 and used > 0 and used + size > maxBytes then
  return -1
end
local maxEntries = tonumber(ARGV[2])
if maxEntries > 0 and redis.call('XLEN', KEYS[1]) >= maxEntries then
  return -2
end
local id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[3], 'n', ARGV[5])
redis.call('INCRBY', KEYS[2], size)
return id
`)

func addLua(ctx context.Context, s *Stream, payload []byte, items int) (string, error) {
	res, err := addLuaScript.Run(ctx, s.rdb, []string{s.keys.Stream, s.keys.Bytes},
		s.bounds.MaxBytes, s.bounds.MaxEntries, payload, len(payload), items).Result()
	if err != nil {
		return "", err
	}
	if id, ok := res.(string); ok {
		return id, nil
	}
	return "", fmt.Errorf("refused: %v", res)
}

// redisCPU returns the CPU seconds Redis's main thread has used, where
// commands run; older servers report only the process total.
func redisCPU(b *testing.B, rdb *redis.Client) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	vals := map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			vals[k] = f
		}
	}
	if u, ok := vals["used_cpu_user_main_thread"]; ok {
		return u + vals["used_cpu_sys_main_thread"]
	}
	return vals["used_cpu_user"] + vals["used_cpu_sys"]
}

// BenchmarkAdd compares the former Lua add with the MULTI/EXEC one for 1 MiB
// entries, in time and in Redis CPU. The CPU figure counts every client of
// the server: run it on an otherwise idle Redis.
func BenchmarkAdd(b *testing.B) {
	payload := payloadOf(1<<20, 1)
	// Bounds set but never reached, so both variants pay for the check.
	bounds := Bounds{MaxBytes: 1 << 40, MaxEntries: 1 << 30}
	for _, v := range []struct {
		name string
		add  func(context.Context, *Stream, []byte, int) (string, error)
	}{
		{"lua", addLua},
		{"multi", func(ctx context.Context, s *Stream, p []byte, n int) (string, error) {
			return s.AddEntry(ctx, "k", "f1", p, n)
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			s, rdb := testStream(b, bounds)
			ctx := context.Background()
			// Load the script outside the timing.
			if _, err := v.add(ctx, s, payload, 1); err != nil {
				b.Fatal(err)
			}
			// Empty the stream every chunk, outside the timing and the CPU
			// count, so that Redis memory stays small.
			const chunk = 50
			var cpu float64
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			for done := 0; done < b.N; {
				b.StopTimer()
				if err := rdb.Unlink(ctx, s.keys.Stream, s.keys.Bytes).Err(); err != nil {
					b.Fatal(err)
				}
				before := redisCPU(b, rdb)
				b.StartTimer()
				for i := 0; i < chunk && done < b.N; i, done = i+1, done+1 {
					if _, err := v.add(ctx, s, payload, 100); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				cpu += redisCPU(b, rdb) - before
				b.StartTimer()
			}
			b.ReportMetric(cpu*1e6/float64(b.N), "redis-cpu-µs/op")
		})
	}
}
