// Package ports picks free loopback ports for the throwaway servers of the
// tests, the bench and the soak.
package ports

import (
	"fmt"
	"net"
	"strconv"
	"testing"
)

// Free reserves n distinct loopback ports. Every listener stays open until
// all are chosen, so no port is handed out twice; another process may still
// take one before the caller binds it, so callers retry on a bind failure.
func Free(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve a port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// One is a single free port.
func One() (int, error) {
	p, err := Free(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Addr is port on loopback as host:port.
func Addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// FreeT is Free for a test, which fails if no port can be had.
func FreeT(t testing.TB, n int) []int {
	t.Helper()
	p, err := Free(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// AddrT is a free loopback host:port for a test: an address where nothing
// listens (yet).
func AddrT(t testing.TB) string {
	t.Helper()
	return Addr(FreeT(t, 1)[0])
}
