// Package servicestest runs scripts/services.sh as `make services` does,
// against throwaway servers, for what a user's machine may hold: a Redis
// that requires a password.
package servicestest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

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
	port := redistest.Start(t, password).Port
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
