package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on
// every Linux the project runs on).
const clockTick = 10 * time.Millisecond

// Proc is one process as its /proc/<pid>/stat tells it.
type Proc struct {
	PID, PPID int
	Comm      string        // the command name, as ps shows it
	CPU       time.Duration // user and system time so far
}

// Processes reads every process on the machine. Processes that end while
// it reads are left out. Empty where there is no /proc.
func Processes() []Proc {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	procs := make([]Proc, 0, len(stats))
	for _, path := range stats {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // gone since the glob
		}
		// pid (comm) state ppid … utime stime: comm may hold spaces and
		// parentheses, so the fields count from its last ')'.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 13 {
			continue
		}
		pid, err1 := strconv.Atoi(strings.TrimSpace(s[:open]))
		ppid, err2 := strconv.Atoi(f[1])
		utime, err3 := strconv.ParseInt(f[11], 10, 64)
		stime, err4 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			continue
		}
		procs = append(procs, Proc{PID: pid, PPID: ppid, Comm: s[open+1 : end], CPU: time.Duration(utime+stime) * clockTick})
	}
	return procs
}

// ProcessCPU is the CPU time every process on the machine has used so
// far, summed per command name ("postgres", "redis-server", "pgsim", the
// test binary's own): a benchmark reads it before and after its work and
// reports each part's share per operation. Processes that end between the
// two readings take their time with them.
func ProcessCPU() map[string]time.Duration {
	cpu := make(map[string]time.Duration)
	for _, p := range Processes() {
		cpu[p.Comm] += p.CPU
	}
	return cpu
}
