package integration

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// tcpProxy sits between a component and the apiserver on the network path:
// it forwards bytes (TLS and all: it sees nothing of the requests), and can
// delay every chunk or cut the component off, as a congested link or a
// partition would.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	delay       time.Duration
	partitioned bool
	conns       map[net.Conn]bool
}

// startTCPProxy proxies to the apiserver cfg points at; the proxy lives as
// long as t.
func startTCPProxy(t *testing.T, cfg *rest.Config) *tcpProxy {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

// config is cfg pointed at the proxy (the apiserver's certificate names
// 127.0.0.1, which the proxy listens on).
func (p *tcpProxy) config(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Host = "https://" + p.ln.Addr().String()
	return cfg
}

// setDelay holds every chunk this long before it is forwarded, both ways.
func (p *tcpProxy) setDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// partition cuts every connection and refuses new ones until heal: in-flight
// requests fail, nothing is delivered late.
func (p *tcpProxy) partition() {
	p.mu.Lock()
	p.partitioned = true
	p.mu.Unlock()
	p.cut()
}

func (p *tcpProxy) heal() {
	p.mu.Lock()
	p.partitioned = false
	p.mu.Unlock()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *tcpProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.partitioned {
			p.mu.Unlock()
			in.Close()
			continue
		}
		p.mu.Unlock()
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// pipe copies src to dst, each chunk after the delay, until either end closes.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer func() {
		dst.Close()
		src.Close()
		p.mu.Lock()
		delete(p.conns, dst)
		delete(p.conns, src)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, or either end closed
		}
	}
}
