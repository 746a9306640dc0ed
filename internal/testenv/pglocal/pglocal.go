package pglocal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
)

// BinDir finds initdb, pg_ctl and pg_basebackup: $POSTGRESCOPY_PG_BIN, the
// newest /usr/lib/postgresql/*/bin, or PATH.
func BinDir() (string, error) {
	if d := os.Getenv("POSTGRESCOPY_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(binDir string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return major(a) - major(b) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "pg_ctl")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup): install postgresql or set POSTGRESCOPY_PG_BIN")
}

// ChownTree gives path and everything under it to the numeric uid and gid
// (as os/user reports them).
func ChownTree(path string, uid, gid string) error {
	u, err := strconv.Atoi(uid)
	if err != nil {
		return err
	}
	g, err := strconv.Atoi(gid)
	if err != nil {
		return err
	}
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, u, g)
	})
}
