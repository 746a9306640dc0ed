package ports

import (
	"net"
	"testing"
)

func TestFreeIsDistinctAndBindable(t *testing.T) {
	ps := FreeT(t, 20)
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("port %d handed out twice in %v", p, ps)
		}
		seen[p] = true
	}
	l, err := net.Listen("tcp", Addr(ps[0]))
	if err != nil {
		t.Fatalf("the free port %d cannot be bound: %v", ps[0], err)
	}
	l.Close()
}
