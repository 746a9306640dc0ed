package coord

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRedis is a tiny RESP2 server that answers the connection handshake
// and then every command with one reply chosen by the test: the protocol
// edge the exporter must survive (errors, nils, empty and ill-shaped
// answers, a dropped connection) without a real server able to produce
// each on demand. Not a database stand-in: the write path is tested
// against real Redis.
type fakeRedis struct {
	ln    net.Listener
	reply func(cmd []string) string // "" drops the connection
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startFakeRedis(t *testing.T, reply func(cmd []string) string) *fakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeRedis{ln: ln, reply: reply}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeRedis) addr() string { return f.ln.Addr().String() }

func (f *fakeRedis) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		cmd, err := readCommand(r)
		if err != nil {
			return
		}
		var out string
		switch strings.ToUpper(cmd[0]) {
		case "HELLO":
			out = "-ERR unknown command 'HELLO'\r\n" // go-redis falls back to RESP2
		case "CLIENT":
			out = "+OK\r\n"
		default:
			out = f.reply(cmd)
		}
		if out == "" {
			return
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// readCommand reads one command: an array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	cmd := make([]string, 0, n)
	for range n {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(h[1:]))
		if err != nil {
			return nil, err
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd = append(cmd, string(b[:size]))
	}
	return cmd, nil
}

// answers are the replies a server, a sentinel or a cluster node may give
// to any command: error replies of every kind the exporter meets, a nil, an
// empty array, wrong shapes, and a connection dropped.
var answers = map[string]string{
	"clusterdown": "-CLUSTERDOWN The cluster is down\r\n",
	"oom":         "-OOM command not allowed when used memory > 'maxmemory'.\r\n",
	"nogroup":     "-NOGROUP No such key or consumer group\r\n",
	"loading":     "-LOADING Redis is loading the dataset in memory\r\n",
	"masterdown":  "-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
	"readonly":    "-READONLY You can't write against a read only replica.\r\n",
	"noperm":      "-NOPERM User u has no permissions to run the 'xadd' command\r\n",
	"moved":       "-MOVED 3999 127.0.0.1:1\r\n",
	"err":         "-ERR something unexpected\r\n",
	"nil bulk":    "$-1\r\n",
	"nil array":   "*-1\r\n",
	"empty array": "*0\r\n",
	"empty bulk":  "$0\r\n\r\n",
	"integer":     ":7\r\n",
	"status":      "+OK\r\n",
	"nested":      "*1\r\n*0\r\n",
	"short array": "*1\r\n$3\r\nabc\r\n",
	"drop":        "",
}

// errorAnswers are the answers after which no call can have succeeded.
func errorAnswer(name string) bool {
	return strings.HasPrefix(answers[name], "-") || name == "drop"
}

// coordCalls are the calls the exporter's loops and start checks make.
func coordCalls(rdb redis.UniversalClient) map[string]func(ctx context.Context) error {
	s := NewStream(rdb, KeysFor("fake", "traces"), Bounds{MaxBytes: 1 << 20, MaxEntries: 100}, "c")
	w := NewStream(rdb, KeysFor("fake", "traces"), Bounds{}, "c")
	w.RequireReplicas(1, 10*time.Millisecond)
	return map[string]func(ctx context.Context) error{
		"Stats":    func(ctx context.Context) error { _, err := s.Stats(ctx); return err },
		"Ensure":   func(ctx context.Context) error { _, err := s.Ensure(ctx); return err },
		"AddEntry": func(ctx context.Context) error { _, err := s.AddEntry(ctx, "k", "f", []byte("x"), 1); return err },
		"AddEntry WAIT": func(ctx context.Context) error {
			_, err := w.AddEntry(ctx, "k", "f", []byte("x"), 1)
			return err
		},
		"Present":        func(ctx context.Context) error { _, err := s.Present(ctx, []string{"1-1", "2-1"}); return err },
		"Node":           func(ctx context.Context) error { _, err := s.Node(ctx); return err },
		"Memory":         func(ctx context.Context) error { _, err := s.Memory(ctx); return err },
		"ReadNew":        func(ctx context.Context) error { _, err := s.ReadNew(ctx, 2, time.Millisecond); return err },
		"ReadOwnPending": func(ctx context.Context) error { _, err := s.ReadOwnPending(ctx, 2); return err },
		"Claim":          func(ctx context.Context) error { _, err := s.Claim(ctx, time.Second, 2); return err },
		"Ack":            func(ctx context.Context) error { return s.Ack(ctx, []Entry{{ID: "1-1", Data: []byte("x")}}) },
		"Audit":          func(ctx context.Context) error { _, err := s.Audit(ctx); return err },
		"PruneConsumers": func(ctx context.Context) error { _, err := s.PruneConsumers(ctx, time.Hour); return err },
		"ReadDurability": func(ctx context.Context) error {
			_, err := ReadDurabilityReplicated(ctx, rdb, 1)
			return err
		},
		"ReadMemory":     func(ctx context.Context) error { _, err := ReadMemory(ctx, rdb); return err },
		"RegisterShards": func(ctx context.Context) error { _, err := RegisterShards(ctx, rdb, "fake", 2); return err },
	}
}

// callAll runs every call against rdb; none may panic, and after an error
// answer each must return an error.
func callAll(t *testing.T, rdb redis.UniversalClient, answer string) {
	t.Helper()
	for name, call := range coordCalls(rdb) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var err error
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s panicked on answer %q: %v", name, answer, p)
				}
			}()
			err = call(ctx)
		}()
		cancel()
		if errorAnswer(answer) {
			assert.Error(t, err, "%s after answer %q", name, answer)
		}
	}
}

// TestCallsSurviveEveryAnswer: every call of the exporter's loops, against
// a node answering each command with each answer, returns (an error after
// an error answer) and never panics.
func TestCallsSurviveEveryAnswer(t *testing.T) {
	for answer, reply := range answers {
		t.Run(answer, func(t *testing.T) {
			f := startFakeRedis(t, func([]string) string { return reply })
			rdb := redis.NewClient(&redis.Options{Addr: f.addr(), MaxRetries: -1, DialTimeout: time.Second,
				ReadTimeout: time.Second, WriteTimeout: time.Second, ContextTimeoutEnabled: true})
			defer rdb.Close()
			callAll(t, rdb, answer)
		})
	}
}

// sentinelAnswers are what a sentinel answers to SENTINEL
// GET-MASTER-ADDR-BY-NAME and the rest: nil for a name it does not monitor,
// an error, or nothing. (go-redis v9.23.0 itself panics, in its own
// goroutine, on an array shorter than two elements, sentinel.go:1077; no
// sentinel sends one.)
var sentinelAnswers = []string{"nil array", "nil bulk", "err", "loading", "noperm", "drop"}

// TestCallsSurviveEverySentinelAnswer: a Sentinel-monitored client whose
// sentinel answers each answer to everything never panics, and errors every
// call; an unknown master_name is classified as such.
func TestCallsSurviveEverySentinelAnswer(t *testing.T) {
	for _, answer := range sentinelAnswers {
		t.Run(answer, func(t *testing.T) {
			t.Parallel()
			reply := answers[answer]
			f := startFakeRedis(t, func([]string) string { return reply })
			rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{f.addr()},
				MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
				ContextTimeoutEnabled: true})
			defer rdb.Close()
			for name, call := range coordCalls(rdb) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := call(ctx)
				cancel()
				require.Error(t, err, "%s: no primary is known", name)
				if answer == "nil array" || answer == "nil bulk" {
					assert.Equal(t, KindUnknownMaster, Classify(err), "%s: %v", name, err)
				}
			}
		})
	}
}

// TestCallsSurviveEveryClusterAnswer: a cluster client whose seed node
// answers each answer to everything (CLUSTER SLOTS and SHARDS included:
// CLUSTERDOWN, no slots, wrong shapes) never panics.
func TestCallsSurviveEveryClusterAnswer(t *testing.T) {
	for answer, reply := range answers {
		t.Run(answer, func(t *testing.T) {
			f := startFakeRedis(t, func([]string) string { return reply })
			rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{f.addr()},
				MaxRetries: -1, MaxRedirects: 1, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
				ContextTimeoutEnabled: true})
			defer rdb.Close()
			callAll(t, rdb, answer)
		})
	}
}
