// Package tcpproxy is a loopback TCP proxy for tests: a server that appears
// after the code under test started (listen on an address chosen before), or
// a peer that goes silent mid-connection (Stall: a half-open connection).
package tcpproxy // import "github.com/postgrescopy/postgrescopy/internal/testenv/tcpproxy"

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections on its address to a target, until the test ends.
type Proxy struct {
	ln      net.Listener
	stalled atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn

	closeOnce sync.Once
}

// Start listens on addr ("127.0.0.1:0" for any port) and forwards every
// connection to target; everything is closed when the test ends.
func Start(t testing.TB, addr, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("tcpproxy: listen on %s: %v", addr, err)
	}
	p := &Proxy{ln: ln}
	p.wg.Add(1)
	go p.accept(target)
	t.Cleanup(p.Close)
	return p
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Stall keeps every connection open but forwards nothing from now on, as a
// peer that vanished without a FIN would.
func (p *Proxy) Stall() { p.stalled.Store(true) }

func (p *Proxy) accept(target string) {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		if p.stalled.Load() {
			_, _ = io.Copy(io.Discard, src)
			return
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (p *Proxy) shut() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Close stops listening and closes every connection, as a server that went
// down would: new connections are refused from now on. Start a new Proxy on
// the same address to bring it back.
func (p *Proxy) Close() { p.closeOnce.Do(p.shut) }
