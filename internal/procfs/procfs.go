// Package procfs reads what pgmsg's benchmarks and test harnesses need of
// Linux's /proc: a process's stat fields, its command name and its
// children.
package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Stat is /proc/PID/stat's fields after the command name, which is in
// parentheses and may hold spaces: Stat[0] is the state (field 3),
// Stat[1] the parent's pid, Stat[11] and Stat[12] utime and stime.
func Stat(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("procfs: bad stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return nil, errors.New("procfs: bad stat")
	}
	return f, nil
}

// Parent is the parent's pid of pid.
func Parent(pid int) (int, error) {
	f, err := Stat(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(f[1])
}

// Comm is pid's command name ("" when it cannot be read).
func Comm(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Children are the live processes whose parent is pid.
func Children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := Parent(k); err == nil && pp == pid {
			out = append(out, k)
		}
	}
	return out
}
