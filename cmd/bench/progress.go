package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// progress shows where the bench is: a bar redrawn in place when stdout is
// a terminal, plain numbered lines on stderr otherwise (CI logs get no
// escape codes).
type progress struct {
	mu    sync.Mutex
	tty   bool
	out   io.Writer // the bar
	log   io.Writer // messages and, without a terminal, the steps
	total int
	done  int
	label string
	start time.Time
	stop  chan struct{}
}

func newProgress(total int) *progress {
	tty := false
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		tty = true
	}
	p := &progress{tty: tty, out: os.Stdout, log: os.Stderr, total: max(total, 1), start: time.Now(), stop: make(chan struct{})}
	if tty {
		// Redraw every second so the clock moves during a long step.
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-t.C:
					p.mu.Lock()
					if p.done > 0 {
						p.draw()
					}
					p.mu.Unlock()
				}
			}
		}()
	}
	return p
}

// step starts the next unit of work.
func (p *progress) step(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	p.total = max(p.total, p.done)
	p.label = label
	if p.tty {
		p.draw()
		return
	}
	fmt.Fprintf(p.log, "[%d/%d %s] %s\n", p.done, p.total, time.Since(p.start).Round(time.Second), label)
}

// message prints a line without breaking the bar.
func (p *progress) message(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.out, "\r\x1b[K")
	}
	fmt.Fprintln(p.log, "bench: "+s)
	select {
	case <-p.stop: // finished: no bar to restore
	default:
		if p.tty && p.done > 0 {
			p.draw()
		}
	}
}

func (p *progress) draw() {
	const width = 30
	filled := width * (p.done - 1) / p.total
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	label := p.label
	if len(label) > 60 {
		label = label[:57] + "..."
	}
	fmt.Fprintf(p.out, "\r\x1b[K%s %d/%d %s %s", bar, p.done, p.total, time.Since(p.start).Round(time.Second), label)
}

// finish stops the redraws and clears the bar so the report starts on a
// clean line. It may be called more than once.
func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.stop:
		return
	default:
		close(p.stop)
	}
	if p.tty {
		fmt.Fprint(p.out, "\r\x1b[K")
	}
}
