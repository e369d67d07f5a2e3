package script_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every Lua script usher runs in Redis is a .lua file that opens with a
// comment naming the file and stating the invariant it keeps, so a reader
// finds the contract before the code. (scripts/ holds the load tools'
// wrk scripts, which Redis never runs.)
func TestEveryLuaFileOpensWithItsInvariant(t *testing.T) {
	files := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && path == filepath.Join("../..", "scripts") {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".lua") {
			return err
		}
		files++
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		var header []string
		sc := bufio.NewScanner(f)
		for sc.Scan() && strings.HasPrefix(sc.Text(), "--") {
			header = append(header, sc.Text())
		}
		if len(header) == 0 || !strings.HasPrefix(header[0], "-- "+filepath.Base(path)) {
			t.Errorf("%s: does not open with a comment naming it (-- %s …)", path, filepath.Base(path))
		}
		if !strings.Contains(strings.ToLower(strings.Join(header, "\n")), "invariant") {
			t.Errorf("%s: its opening comment states no invariant", path)
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 30 {
		t.Fatalf("found %d .lua files; the walk missed the scripts", files)
	}
}

// Every script usher runs goes through this package, so that every call
// declares its slot's guard (see Guard): a script built with go-redis's
// own NewScript would run half-way while its slot moves.
func TestEveryScriptIsGuarded(t *testing.T) {
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			filepath.Dir(path) == filepath.Join("../..", "internal", "script") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "redis.NewScript(") {
			t.Errorf("%s: builds a script with redis.NewScript; use script.New", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
