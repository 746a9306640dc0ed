package pgsink

import (
	"testing"

	"go.uber.org/goleak"
)

// The sink's loops must be gone once Stop and Wait returned.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
