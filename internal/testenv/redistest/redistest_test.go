package redistest

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEndpointForms(t *testing.T) {
	for _, tc := range []struct {
		env, addr, user, pass, redacted string
		db                              int
	}{
		{"", "127.0.0.1:6379", "", "", "127.0.0.1:6379", 0},
		{"127.0.0.1:6380", "127.0.0.1:6380", "", "", "127.0.0.1:6380", 0},
		{"redis://:s3cr%40t@127.0.0.1:6379/2", "127.0.0.1:6379", "", "s3cr@t", "redis://:xxxxx@127.0.0.1:6379/2", 2},
		{"rediss://ci:pw@db.example:6380", "db.example:6380", "ci", "pw", "rediss://ci:xxxxx@db.example:6380", 0},
	} {
		t.Setenv("POSTGRESCOPY_TEST_REDIS", tc.env)
		o := Options()
		assert.Equal(t, tc.addr, o.Addr, tc.env)
		assert.Equal(t, tc.user, o.Username, tc.env)
		assert.Equal(t, tc.pass, o.Password, tc.env)
		assert.Equal(t, tc.db, o.DB, tc.env)
		assert.Equal(t, tc.redacted, Redacted(), tc.env)
		assert.NotContains(t, Redacted(), "s3cr")
	}
}
