package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// procTimes reads /proc/<pid>/stat's CPU times: the process's own (utime +
// stime) and its waited-for children's (cutime + cstime).
func procTimes(pid string) (own, children time.Duration, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, false
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. Counting from there, utime is the 12th field.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 15 {
		return 0, 0, false
	}
	var t [4]int64
	for k := range t {
		if t[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0, false
		}
	}
	tick := time.Second / clockTicks
	return time.Duration(t[0]+t[1]) * tick, time.Duration(t[2]+t[3]) * tick, true
}

// cpuMark is the CPU time used so far by the processes a timed write is
// accounted against; the difference of two marks is what the write cost.
type cpuMark struct {
	// postgres counts every process named postgres, and through the
	// postmaster's children times the backends that exited (psql's).
	postgres time.Duration
	redis    time.Duration
	// self and children are the bench process's own CPU (its in-process
	// strategies) and that of the children it has waited for (psql).
	self, children time.Duration
	// collector is the collector process's own CPU, when one is named.
	collector time.Duration
	// backends is the client backends' CPU (live ones' own, exited ones'
	// through the postmaster's children times), on the bench's own server
	// only (-layout split).
	backends time.Duration
}

// markCPU reads the CPU used so far; collectorPID 0 names no collector.
func markCPU(collectorPID int) cpuMark {
	var m cpuMark
	m.self, m.children, _ = procTimes("self")
	if collectorPID > 0 {
		m.collector, _, _ = procTimes(strconv.Itoa(collectorPID))
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return m
	}
	if ownPostmaster > 0 {
		m.postgres, m.backends, m.redis = ownServerTimes(ents)
		return m
	}
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", pid, "comm"))
		if err != nil {
			continue
		}
		switch strings.TrimSpace(string(comm)) {
		case "postgres":
			own, children, _ := procTimes(pid)
			m.postgres += own + children
		case "redis-server":
			own, _, _ := procTimes(pid)
			m.redis += own
		}
	}
	return m
}

// cpuPerRow is the CPU a timed write cost per row, in microseconds. All of
// it shares the machine's cores, so (PostgreSQL + client + Redis) per row
// bounds the rows/s any strategy can reach here.
type cpuPerRow struct {
	PostgreSQL float64 `json:"postgresql"`
	// Client is psql for the ceiling, the bench's own process for the
	// in-process strategies, and the collector process for its runs.
	Client float64 `json:"client"`
	Redis  float64 `json:"redis"`
	// Backends is the part of PostgreSQL the client backends spent (the
	// write's own connections), measured on the bench's own server only.
	Backends float64 `json:"postgresql_backends,omitempty"`
}

// client says whose CPU is the client's between two marks.
type client int

const (
	clientChildren  client = iota // psql, waited for by the bench
	clientSelf                    // the bench's own connections
	clientCollector               // the collector process
)

func cpuBetween(a, b cpuMark, who client, rows int64) *cpuPerRow {
	if rows <= 0 {
		return nil
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rows) }
	c := &cpuPerRow{PostgreSQL: us(b.postgres - a.postgres), Redis: us(b.redis - a.redis), Backends: us(b.backends - a.backends)}
	switch who {
	case clientChildren:
		c.Client = us(b.children - a.children)
	case clientSelf:
		c.Client = us(b.self - a.self)
	case clientCollector:
		c.Client = us(b.collector - a.collector)
	}
	return c
}

func (c *cpuPerRow) String() string {
	if c == nil {
		return "—"
	}
	s := strconv.FormatFloat(c.PostgreSQL, 'f', 1, 64)
	if c.Backends > 0 {
		s += " (backends " + strconv.FormatFloat(c.Backends, 'f', 1, 64) + ")"
	}
	s += " + " + strconv.FormatFloat(c.Client, 'f', 1, 64)
	if c.Redis >= 0.05 {
		s += " + " + strconv.FormatFloat(c.Redis, 'f', 1, 64)
	}
	return s
}
