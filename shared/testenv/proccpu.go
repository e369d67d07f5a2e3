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

// ProcessCPU is the CPU time (user and system) every process on the
// machine has used so far, summed per command name (/proc/<pid>/stat's
// comm: "postgres", "redis-server", "pgsim", the test binary's own): a
// benchmark reads it before and after its work and reports each part's
// share per operation. Processes that end between the two readings take
// their time with them. Empty where there is no /proc.
func ProcessCPU() map[string]time.Duration {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	cpu := make(map[string]time.Duration)
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
		utime, err1 := strconv.ParseInt(f[11], 10, 64)
		stime, err2 := strconv.ParseInt(f[12], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		cpu[s[open+1:end]] += time.Duration(utime+stime) * clockTick
	}
	return cpu
}
