// Package servicestest runs scripts/services.sh as `make services` does,
// against throwaway servers, for what a user's machine may hold: a Redis
// that requires a password.
package servicestest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// passwordRedis starts a redis-server that requires password and returns
// its port.
func passwordRedis(t *testing.T, password string) int {
	if _, err := exec.LookPath("redis-server"); err != nil {
		pgtest.Unavailable(t, "redis-server is not installed (make deps)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	dir := t.TempDir()
	conf := filepath.Join(dir, "redis.conf")
	// In a file, so that the password is in no process's arguments.
	require.NoError(t, os.WriteFile(conf, []byte("port "+strconv.Itoa(port)+"\nbind 127.0.0.1\nsave \"\"\nappendonly no\n"+
		"dir "+dir+"\nrequirepass \""+password+"\"\n"), 0o600))
	cmd := exec.Command("redis-server", conf)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for range 100 {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
			return port
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis-server did not listen on %d", port)
	return 0
}

func services(t *testing.T, redis string) (string, string, error) {
	data := t.TempDir()
	cmd := exec.Command("bash", "../services.sh")
	cmd.Env = append(os.Environ(), "POSTGRESCOPY_DATA="+data, "POSTGRESCOPY_TEST_URL="+pgtest.URL(),
		"POSTGRESCOPY_REDIS="+redis, "POSTGRESCOPY_TEST_REDIS=")
	out, err := cmd.CombinedOutput()
	env, _ := os.ReadFile(filepath.Join(data, "services.env"))
	return string(out), string(env), err
}

func TestRedisWithPassword(t *testing.T) {
	const password = "s3cr@t:/!%x"
	port := passwordRedis(t, password)
	escaped := strings.NewReplacer("@", "%40", ":", "%3A", "/", "%2F", "!", "%21", "%", "%25").Replace(password)
	hostport := "127.0.0.1:" + strconv.Itoa(port)

	t.Run("URL with the password", func(t *testing.T) {
		url := "redis://:" + escaped + "@" + hostport
		out, env, err := services(t, url)
		require.NoError(t, err, out)
		assert.Contains(t, out, "Redis answers at redis://:***@"+hostport)
		assert.NotContains(t, out, "s3cr")
		assert.Contains(t, env, "POSTGRESCOPY_REDIS='"+url+"'", "the recipes get the URL as given")
	})
	t.Run("user and password", func(t *testing.T) {
		out, _, err := services(t, "redis://default:"+escaped+"@"+hostport+"/0")
		require.NoError(t, err, out)
		assert.NotContains(t, out, "s3cr")
	})
	t.Run("wrong password", func(t *testing.T) {
		out, _, err := services(t, "redis://:wr0ng-"+escaped+"@"+hostport)
		require.Error(t, err)
		assert.Contains(t, out, "refuses these credentials")
		assert.Contains(t, out, "redis://:PASSWORD@host:port")
		assert.NotContains(t, out, "wr0ng")
		assert.NotContains(t, out, "s3cr")
	})
	t.Run("no password", func(t *testing.T) {
		out, _, err := services(t, hostport)
		require.Error(t, err)
		assert.Contains(t, out, "NOAUTH")
		assert.Contains(t, out, "give its password as redis://:PASSWORD@host:port")
	})
}
