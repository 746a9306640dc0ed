package main

import (
	"bufio"
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machine is the hardware and server line every result is read against.
type machine struct {
	CPU        string            `json:"cpu_model"`
	Cores      int               `json:"cores"`
	RAMBytes   int64             `json:"ram_bytes"`
	RAM        string            `json:"ram"`
	OS         string            `json:"os"`
	PostgreSQL string            `json:"postgresql_version"`
	Settings   map[string]string `json:"postgresql_settings"`
	Date       string            `json:"date"`
	// LoadStart and LoadEnd are /proc/loadavg's 1, 5 and 15 minute load
	// averages when the bench started and ended: other work on the machine
	// shows up there and explains noisy numbers.
	LoadStart string `json:"load_average_start,omitempty"`
	LoadEnd   string `json:"load_average_end,omitempty"`
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func (m machine) line() string {
	return m.CPU + ", " + strconv.Itoa(m.Cores) + " cores, " + m.RAM + " RAM, " + m.OS + "; " +
		m.PostgreSQL + "; " + m.Date
}

// settingsShown are the server settings that move write throughput most.
var settingsShown = []string{"shared_buffers", "max_wal_size", "synchronous_commit", "wal_compression",
	"default_toast_compression", "max_connections"}

func (b *bench) machine(ctx context.Context) machine {
	m := machine{CPU: "unknown CPU", Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Settings: map[string]string{}, LoadStart: loadAverage()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.RAMBytes = kb * 1024
				m.RAM = strconv.FormatFloat(float64(m.RAMBytes)/(1<<30), 'f', 1, 64) + " GiB"
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS = "Linux " + strings.TrimSpace(string(b))
	}
	var v string
	if err := b.pool.QueryRow(ctx, "SELECT current_setting('server_version')").Scan(&v); err == nil {
		m.PostgreSQL = "PostgreSQL " + v
	}
	for _, s := range settingsShown {
		var val string
		if err := b.pool.QueryRow(ctx, "SELECT current_setting($1, true)", s).Scan(&val); err == nil {
			m.Settings[s] = val
		}
	}
	return m
}
