// Command netproxy gives a network namespace that has only loopback (the
// fresh-machine check's `unshare --net`) a way to the package mirror and the
// Go module proxy, and nothing else on the host:
//
//	netproxy serve PATH        HTTP proxy (CONNECT and plain GET) on a Unix socket, on the host
//	netproxy bridge ADDR PATH  TCP listener on ADDR inside the namespace, piped to the socket
//
// A Unix socket in the file system crosses network namespaces; the proxy
// refuses loopback and private destinations, so the host's own PostgreSQL
// and Redis stay out of reach.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: netproxy serve PATH | netproxy bridge ADDR PATH")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2])
	case "bridge":
		if len(os.Args) < 4 {
			err = errors.New("bridge needs ADDR and PATH")
		} else {
			err = bridge(os.Args[2], os.Args[3])
		}
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		log.Fatalf("netproxy: %v", err)
	}
}

func serve(path string) error {
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	if err := os.Chmod(path, 0o666); err != nil {
		return err
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			if ip.IP.IsLoopback() || ip.IP.IsPrivate() || ip.IP.IsUnspecified() || ip.IP.IsLinkLocalUnicast() {
				return nil, fmt.Errorf("refused: %s is a host-local address", ip.IP)
			}
		}
		return dialer.DialContext(ctx, network, net.JoinHostPort(ips[0].IP.String(), port))
	}
	transport := &http.Transport{DialContext: dial, Proxy: nil}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			up, err := dial(r.Context(), "tcp", r.Host)
			if err != nil {
				http.Error(w, err.Error(), http.StatusForbidden)
				return
			}
			hj, ok := w.(http.Hijacker)
			if !ok {
				up.Close()
				http.Error(w, "no hijack", http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
			c, buf, err := hj.Hijack()
			if err != nil {
				up.Close()
				return
			}
			if n := buf.Reader.Buffered(); n > 0 {
				b, _ := buf.Reader.Peek(n)
				_, _ = up.Write(b)
			}
			pipe(c, up)
			return
		}
		if r.URL.Host == "" {
			http.Error(w, "not a proxy request", http.StatusBadRequest)
			return
		}
		r.RequestURI = ""
		r.Header.Del("Proxy-Connection")
		resp, err := transport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	return (&http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}).Serve(l)
}

func bridge(addr, path string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			up, err := net.Dial("unix", path)
			if err != nil {
				log.Printf("netproxy: dial %s: %v", path, err)
				c.Close()
				return
			}
			pipe(c, up)
		}()
	}
}

// pipe copies both ways until either side closes, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) { _, _ = io.Copy(dst, src); done <- struct{}{} }
	go cp(a, b)
	go cp(b, a)
	<-done
	a.Close()
	b.Close()
}
