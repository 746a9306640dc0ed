package postgrescopyexporter

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// secretSpecials are the characters that mean something in a URL or a
// keyword/value DSN (issue 15 item 7).
const secretSpecials = `@:/?#% '"`

// secretPasswords hold each special character, alone and together. The
// ordinary runs between them are distinct and unlikely in any log text, so a
// leaked fragment is recognized.
var secretPasswords = []string{
	"Qv7Kp@Zr4Wn@Jt2Lm", // the shape: raw '@'s in the URL
	"Hb3Xc:Ud6Ye",
	"Fa8Gs/Mk1Ow",
	"Ri5Tq?Ep9Nv",
	"Cy2Bl#Ai7Dz",
	"Wo4Ix%Sh3Pj", // '%' not followed by hex digits
	"Kn6Vr%41Fm8", // '%' followed by hex digits: a raw URL would decode it
	"Lu1Qe Zg5Hc", // the DSN with a space
	"Mt9Ja'Yk2Ob",
	`Nd3Ew"Rs6Tf`,
	`Pc7Ug@:/?#% '"Vh4Wi`,
	`'Ea1Fb@Gc2 Hd3"`,
	`%Je5Kf/Lg6 `,
}

// secretFragments are what must never appear: the password, each 3-character
// window around a special character (windows of special characters only are
// not secret material), and each run of 3+ ordinary characters.
func secretFragments(pw string) []string {
	out := []string{pw}
	ordinary := func(s string) bool {
		return strings.IndexFunc(s, func(r rune) bool { return !strings.ContainsRune(secretSpecials, r) }) >= 0
	}
	for i := 0; i < len(pw); i++ {
		if !strings.ContainsRune(secretSpecials, rune(pw[i])) {
			continue
		}
		for s := i - 2; s <= i; s++ {
			if s >= 0 && s+3 <= len(pw) && ordinary(pw[s:s+3]) {
				out = append(out, pw[s:s+3])
			}
		}
	}
	for _, run := range strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune(secretSpecials, r) }) {
		if len(run) >= 3 {
			out = append(out, run)
		}
	}
	return out
}

func requireNoFragment(t *testing.T, what, s, pw string) {
	t.Helper()
	for _, f := range secretFragments(pw) {
		if strings.Contains(s, f) {
			t.Errorf("%s holds %q, part of the password %q: %s", what, f, pw, s)
			return
		}
	}
}

// pctEncode percent-encodes every byte but letters and digits.
func pctEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// pctDecode decodes the valid percent-encodings of s.
func pctDecode(s string) string {
	if d, err := url.PathUnescape(s); err == nil {
		return d
	}
	return s
}

// dsnQuote writes s as a quoted keyword/value DSN value.
func dsnQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// pgEndpoint is one way of writing the password into the exporter config.
type pgEndpoint struct {
	name string
	// wellFormed: written as the format says a password must be; it must be
	// accepted. The others may be refused, but never misread.
	wellFormed bool
	endpoint   func(user, pw string, port int) string
	// meant is the password the written form says by its own syntax: a raw
	// "%41" in a URL is an 'A', an unquoted DSN value ends at a space.
	meant func(pw string) string
	// passwordKey puts pw into the password key instead.
	passwordKey bool
}

func pgEndpoints(srv *pgtest.TLSServer) []pgEndpoint {
	query := "sslmode=verify-full&sslrootcert=" + url.QueryEscape(srv.CAFile)
	dsnTail := func(user string, port int) string {
		return fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=verify-full sslrootcert=%s", srv.Host, port, user, dsnQuote(srv.CAFile))
	}
	return []pgEndpoint{
		{name: "url_encoded", wellFormed: true, endpoint: func(user, pw string, port int) string {
			return fmt.Sprintf("postgres://%s:%s@%s:%d/postgres?%s", user, pctEncode(pw), srv.Host, port, query)
		}},
		{name: "url_raw", meant: pctDecode, endpoint: func(user, pw string, port int) string {
			return fmt.Sprintf("postgres://%s:%s@%s:%d/postgres?%s", user, pw, srv.Host, port, query)
		}},
		{name: "dsn_quoted", wellFormed: true, endpoint: func(user, pw string, port int) string {
			return "password=" + dsnQuote(pw) + " " + dsnTail(user, port)
		}},
		{name: "dsn_raw", meant: func(pw string) string { return strings.TrimRight(pw, " ") }, endpoint: func(user, pw string, port int) string {
			return "password=" + pw + " " + dsnTail(user, port)
		}},
		{name: "password_key", wellFormed: true, passwordKey: true, endpoint: func(user, _ string, port int) string {
			return fmt.Sprintf("postgres://%s@%s:%d/postgres?%s", user, srv.Host, port, query)
		}},
	}
}

// TestSecretsNeverInErrorsOrLogs: whatever characters a password holds, and
// however it is written (URL, keyword/value DSN, password key), Validate,
// Start and every log line are free of it; an endpoint that cannot be read
// unambiguously is refused rather than misread (issue 15 item 7: a raw '@'
// put "ss@w0rdAT" into every retry's Warn line, and a DSN with a space
// echoed "w0rd").
func TestSecretsNeverInErrorsOrLogs(t *testing.T) {
	srv := pgtest.StartTLSServer(t)
	admin := srv.Pool(t)
	closed := closedPort(t)
	var waiting []waitingExporter

	for i, pw := range secretPasswords {
		user := fmt.Sprintf("pw_%d", i)
		var ddl string
		require.NoError(t, admin.QueryRow(context.Background(),
			"SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)", user, pw).Scan(&ddl))
		_, err := admin.Exec(context.Background(), ddl)
		require.NoError(t, err)

		for _, form := range pgEndpoints(srv) {
			t.Run(fmt.Sprintf("%d/%s", i, form.name), func(t *testing.T) {
				configFor := func(pw string, port int) *Config {
					cfg := defaultConfig()
					cfg.Schema = "secrets_absent" // create_schema false: Start proves the login, then fails
					cfg.CreateSchema = false
					cfg.RetryConfig.Enabled = false
					cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
					cfg.Endpoint = configopaque.String(form.endpoint(user, pw, port))
					if form.passwordKey {
						cfg.Password = configopaque.String(pw)
					}
					return cfg
				}

				cfg := configFor(pw, srv.Port)
				if err := confmap.Validate(cfg); err != nil {
					requireNoFragment(t, "Validate's error", err.Error(), pw)
					require.False(t, form.wellFormed, "a well-formed endpoint is refused: %v", err)
					return
				}
				// Accepted: it must be read exactly as meant.
				pc, err := pgxpool.ParseConfig(string(cfg.Endpoint))
				require.NoError(t, err)
				meant := pw
				if form.meant != nil {
					meant = form.meant(pw)
				}
				if !form.passwordKey {
					require.Equal(t, meant, pc.ConnConfig.Password, "the endpoint was accepted but its password misread")
				}
				require.Equal(t, user, pc.ConnConfig.User)
				require.Equal(t, srv.Host, pc.ConnConfig.Host)
				require.EqualValues(t, srv.Port, pc.ConnConfig.Port)

				set, logs := observedSettings()
				// The right password: the login succeeds and Start fails on
				// the missing schema.
				err = startAndPush(t, cfg, set)
				if meant == pw {
					require.ErrorContains(t, err, "schema is missing tables or columns")
				} else {
					require.ErrorContains(t, err, "password authentication failed")
				}
				requireNoFragment(t, "Start's error (right password)", err.Error(), pw)

				// A wrong password that holds the right one: the server's
				// rejection.
				wrong := configFor(pw+"Zq", srv.Port)
				err = startAndPush(t, wrong, set)
				require.Error(t, err)
				requireNoFragment(t, "Start's error (wrong password)", err.Error(), pw)
				if verr := confmap.Validate(wrong); verr != nil {
					// Unquoted in a DSN, the added text became a stray word.
					requireNoFragment(t, "Validate's error (wrong password)", verr.Error(), pw)
				} else {
					require.ErrorContains(t, err, "password authentication failed")
				}

				// Nothing listening: Start succeeds, the push says why it
				// cannot write, and the background wait logs its retries.
				// All of these wait together below.
				te := startWaiting(t, configFor(pw, closed), set, pw)
				waiting = append(waiting, waitingExporter{name: t.Name(), te: te, logs: logs, pw: pw})
			})
		}
	}

	// waitReady retries after 1s: every exporter's first retry is logged by then.
	ctx := context.Background()
	for _, w := range waiting {
		require.Eventually(t, func() bool {
			return w.logs.FilterMessage("still waiting for PostgreSQL").Len() > 0
		}, 10*time.Second, 20*time.Millisecond, "%s: no retry logged", w.name)
		require.NoError(t, w.te.Shutdown(ctx))
		for _, e := range w.logs.All() {
			requireNoFragment(t, w.name+": a log line", renderEntry(e), w.pw)
		}
	}
}

type waitingExporter struct {
	name string
	te   exporter.Traces
	logs *observer.ObservedLogs
	pw   string
}

// startWaiting starts an exporter against a closed port and checks the
// push's error.
func startWaiting(t *testing.T, cfg *Config, set exporter.Settings, pw string) exporter.Traces {
	t.Helper()
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	err = te.ConsumeTraces(ctx, makeTraces(1, "secrets"))
	require.ErrorContains(t, err, "waiting for PostgreSQL")
	requireNoFragment(t, "the push error", err.Error(), pw)
	return te
}

// TestRedisSecretsNeverInErrorsOrLogs is the same for the redis section: a
// password in a redis:// URL, raw or percent-encoded, or in redis::password,
// against a throwaway Redis that requires another password (a real
// rejection) and against a closed port.
func TestRedisSecretsNeverInErrorsOrLogs(t *testing.T) {
	base, _ := testConfig(t) // one schema for every subtest: migrated once
	addrs := map[string]string{
		"rejecting":   redistest.Start(t, "Yy0Other-requirepass").Addr(),
		"unreachable": fmt.Sprintf("127.0.0.1:%d", closedPort(t)),
	}
	forms := []struct {
		name       string
		wellFormed bool
		set        func(rc *RedisConfig, addr, pw string)
	}{
		{"url_encoded", true, func(rc *RedisConfig, addr, pw string) {
			rc.Endpoint = configopaque.String("redis://:" + pctEncode(pw) + "@" + addr)
		}},
		{"url_raw", false, func(rc *RedisConfig, addr, pw string) {
			rc.Endpoint = configopaque.String("redis://:" + pw + "@" + addr)
		}},
		{"url_user_raw", false, func(rc *RedisConfig, addr, pw string) {
			rc.Endpoint = configopaque.String("redis://default:" + pw + "@" + addr + "/0")
		}},
		{"password_key", true, func(rc *RedisConfig, addr, pw string) {
			rc.Endpoint = configopaque.String(addr)
			rc.Password = configopaque.String(pw)
		}},
	}
	// Each exporter waits out go-redis's retries; a few run at once, each
	// with two PostgreSQL connections, since that server is shared.
	type outcome struct {
		name    string
		pw      string
		pushErr error
		warned  bool
		stopErr error
		logs    *observer.ObservedLogs
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
		slots    = make(chan struct{}, 6)
	)
	ctx := context.Background()
	for i, pw := range secretPasswords {
		for _, form := range forms {
			for _, where := range []string{"rejecting", "unreachable"} {
				addr := addrs[where]
				t.Run(fmt.Sprintf("%d/%s/%s", i, form.name, where), func(t *testing.T) {
					c := *base
					cfg := withRedis(&c, fmt.Sprintf("pgct-secrets-%d", i), "secrets")
					cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
					cfg.MaxConns = 2 // prepare holds one while it maintains partitions with another
					rc := cfg.Redis.Get()
					form.set(rc, addr, pw)
					if err := confmap.Validate(cfg); err != nil {
						requireNoFragment(t, "Validate's error", err.Error(), pw)
						require.False(t, form.wellFormed, "a well-formed endpoint is refused: %v", err)
						return
					}
					opt, err := rc.options()
					require.NoError(t, err)
					meant := pw
					if !form.wellFormed {
						meant = pctDecode(pw)
					}
					require.Equal(t, meant, opt.Password, "the endpoint was accepted but its password misread")
					require.Equal(t, addr, opt.Addr)

					set, logs := observedSettings()
					te, err := NewFactory().CreateTraces(ctx, set, cfg)
					require.NoError(t, err)
					slots <- struct{}{}
					if err := te.Start(ctx, componenttest.NewNopHost()); err != nil {
						<-slots
						requireNoFragment(t, "Start's error", err.Error(), pw)
						require.NoError(t, te.Shutdown(ctx))
						return
					}
					name := t.Name()
					wg.Go(func() {
						defer func() { <-slots }()
						o := outcome{name: name, pw: pw, logs: logs}
						o.pushErr = te.ConsumeTraces(ctx, makeTraces(1, "secrets"))
						// The flush workers meet the same refusal and log it.
						for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
							if o.warned = logs.FilterLevelExact(zapcore.WarnLevel).Len() > 0; o.warned {
								break
							}
						}
						o.stopErr = te.Shutdown(ctx)
						mu.Lock()
						outcomes = append(outcomes, o)
						mu.Unlock()
					})
				})
			}
		}
	}
	wg.Wait()
	require.NotEmpty(t, outcomes)
	for _, o := range outcomes {
		require.Error(t, o.pushErr, "%s: Redis must refuse", o.name)
		requireNoFragment(t, o.name+": the push error", o.pushErr.Error(), o.pw)
		require.True(t, o.warned, "%s: no flush worker warning", o.name)
		require.NoError(t, o.stopErr, o.name)
		for _, e := range o.logs.All() {
			requireNoFragment(t, o.name+": a log line", renderEntry(e), o.pw)
		}
	}
	// go-redis's dial prober of an unreachable server sees the client's
	// Close only after its 1s sleep; wait for it so goleak does not flag it.
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<22)
		return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
	}, 5*time.Second, 50*time.Millisecond, "go-redis dial goroutines outlive Close")
}

// TestEndpointErrorsQuoteNothing: Validate's refusal of an endpoint names the
// fix without quoting any of it.
func TestEndpointErrorsQuoteNothing(t *testing.T) {
	for _, c := range []struct{ endpoint, want string }{
		{"postgres://pwuser:p@ss@w0rdAT@127.0.0.1:25432/postgres", "%40"},
		{"postgres://pwuser:Fa8Gs/Mk1Ow@127.0.0.1:25432/postgres", "%2F"},
		{"postgres://pwuser:Wo4Ix%Sh3Pj@127.0.0.1:25432/postgres", "%25"},
		{"postgres://pwuser:Lu1Qe Zg5Hc@127.0.0.1:25432/postgres", "%20"},
		{"host=127.0.0.1 user=pwuser password=Lu1Qe Zg5Hc dbname=postgres", "quote"},
	} {
		cfg := defaultConfig()
		cfg.Endpoint = configopaque.String(c.endpoint)
		err := cfg.Validate()
		require.Error(t, err, c.endpoint)
		require.ErrorContains(t, err, c.want)
		for _, frag := range []string{"ss@w0", "w0rdAT", "Mk1Ow", "Sh3Pj", "Zg5Hc", "Lu1Qe"} {
			require.NotContains(t, err.Error(), frag)
		}
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	p, err := ports.One()
	require.NoError(t, err)
	return p
}
