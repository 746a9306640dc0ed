// Package pgcount is a loopback TCP proxy in front of PostgreSQL that counts
// the round trips its clients make: every simple query and every Sync of
// the extended protocol is a message after which the client waits for the
// server's ReadyForQuery. It groups them by transaction (BEGIN to COMMIT or
// ROLLBACK), for tests and the bench to tell what one write costs in round
// trips. It reads the client's messages only (no TLS: sslmode=disable).
package pgcount // import "github.com/postgrescopy/postgrescopy/internal/testenv/pgcount"

import (
	"bytes"
	"encoding/binary"
	"net"
	"strings"
	"sync"
)

// Transaction is one transaction a client ran through the proxy.
type Transaction struct {
	// RoundTrips are the messages of the transaction after which the client
	// waited for the server: its BEGIN's to its COMMIT's.
	RoundTrips int
	// Statements are the SQL texts run, in order: a simple query's whole
	// text, the prepared statement of an extended-protocol Bind.
	Statements []string
}

// Has reports whether one of t's statements contains s.
func (t Transaction) Has(s string) bool {
	for _, st := range t.Statements {
		if strings.Contains(st, s) {
			return true
		}
	}
	return false
}

// Proxy forwards connections on its address to a PostgreSQL server.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	conns  []net.Conn
	txs    []Transaction
	trips  int
	closed bool
}

// Start listens on addr ("127.0.0.1:0" for any port) and forwards every
// connection to target (host:port).
func Start(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln}
	p.wg.Add(1)
	go p.accept(target)
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Transactions returns the transactions completed so far.
func (p *Proxy) Transactions() []Transaction {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Transaction(nil), p.txs...)
}

// RoundTrips is how many round trips every client made so far, in
// transactions or not.
func (p *Proxy) RoundTrips() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.trips
}

// Reset forgets the transactions and round trips counted so far.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.txs, p.trips = nil, 0
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

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
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, s, nil)
		go p.pipe(s, c, &session{p: p, startup: true})
	}
}

// pipe copies src to dst, parsing what it copies when ss is set.
func (p *Proxy) pipe(dst, src net.Conn, ss *session) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if ss != nil {
				ss.feed(buf[:n])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// session parses one client's messages.
type session struct {
	p       *Proxy
	startup bool   // the next message has no type byte
	pending []byte // an incomplete message's bytes
	skip    int    // bytes of a message being skipped (copy data)

	stmts    []string          // sent since the last round trip
	prepared map[string]string // statement texts by name ("": the unnamed one)
	inTx     bool
	tx       Transaction
}

func (s *session) feed(b []byte) {
	for len(b) > 0 {
		if s.skip > 0 {
			k := min(s.skip, len(b))
			s.skip -= k
			b = b[k:]
			continue
		}
		s.pending = append(s.pending, b...)
		b = nil
		for s.next() {
		}
	}
}

// next handles one complete message of pending, if there is one.
func (s *session) next() bool {
	head := 5
	if s.startup {
		head = 4
	}
	if len(s.pending) < head {
		return false
	}
	var typ byte
	var n int
	if s.startup {
		n = int(binary.BigEndian.Uint32(s.pending))
	} else {
		typ = s.pending[0]
		n = int(binary.BigEndian.Uint32(s.pending[1:])) + 1
	}
	if typ == 'd' && len(s.pending) < n {
		// Copy data: not read, and not held.
		s.skip = n - len(s.pending)
		s.pending = s.pending[:0]
		return false
	}
	if len(s.pending) < n {
		return false
	}
	msg := s.pending[head:n]
	if s.startup {
		code := uint32(0)
		if len(msg) >= 4 {
			code = binary.BigEndian.Uint32(msg)
		}
		// SSLRequest and GSSENCRequest are followed by the startup message.
		s.startup = code == 80877103 || code == 80877104
	} else {
		s.message(typ, msg)
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
	return true
}

func cstring(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

func (s *session) message(typ byte, msg []byte) {
	switch typ {
	case 'Q':
		s.stmts = append(s.stmts, cstring(msg))
		s.roundTrip()
	case 'P':
		// Recorded when bound: a statement prepared once runs by name.
		if i := bytes.IndexByte(msg, 0); i >= 0 {
			if s.prepared == nil {
				s.prepared = map[string]string{}
			}
			s.prepared[string(msg[:i])] = cstring(msg[i+1:])
		}
	case 'B':
		if i := bytes.IndexByte(msg, 0); i >= 0 {
			if q, ok := s.prepared[cstring(msg[i+1:])]; ok {
				s.stmts = append(s.stmts, q)
			}
		}
	case 'S':
		s.roundTrip()
	}
}

// roundTrip ends the messages the client sent before it waits.
func (s *session) roundTrip() {
	stmts := s.stmts
	s.stmts = nil
	begins, ends := false, false
	for k, st := range stmts {
		for j, part := range strings.Split(st, ";") {
			w := strings.ToUpper(strings.TrimSpace(part))
			if k == 0 && j == 0 && strings.HasPrefix(w, "BEGIN") {
				begins = true
			}
			if w == "COMMIT" || w == "ROLLBACK" || w == "END" || w == "ABORT" {
				ends = true
			}
		}
	}
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	s.p.trips++
	if begins && !s.inTx {
		s.inTx = true
		s.tx = Transaction{}
	}
	if !s.inTx {
		return
	}
	s.tx.RoundTrips++
	s.tx.Statements = append(s.tx.Statements, stmts...)
	if ends {
		s.inTx = false
		s.p.txs = append(s.p.txs, s.tx)
	}
}
