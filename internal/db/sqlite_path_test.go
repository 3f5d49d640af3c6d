package db_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-dev/sluice/internal/db"
)

// TestSQLiteOpensExactlyTheNamedFile: sqlite:PATH opens the file PATH names, whatever characters
// it holds (a file: URI would end the path at '?' or '#' and decode '%41'), in WAL mode (a '?'
// pasted into the URI swallowed the first _pragma, journal_mode), and creates no other file.
func TestSQLiteOpensExactlyTheNamedFile(t *testing.T) {
	for _, name := range []string{"plain.db", "a?b.db", "c#d.db", "e%41.db", "sp ace.db", "f&_pragma=journal_mode(delete).db", "g%3Fh.db"} {
		t.Run(name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			want := filepath.Join(dir, name)
			checkOpensExactly(t, "sqlite:"+want, dir, want, name)
		})
	}
	t.Run("relative", func(t *testing.T) {
		dir, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Chdir(dir)
		checkOpensExactly(t, "sqlite:sub/x?y#z%41.db", filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "x?y#z%41.db"), "x?y#z%41.db")
	})
	t.Run("double slash", func(t *testing.T) {
		dir, err := filepath.EvalSymlinks(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		// "//tmp/…" is the same file as "/tmp/…", never a URI's host.
		checkOpensExactly(t, "sqlite:/"+filepath.Join(dir, "h.db"), dir, filepath.Join(dir, "h.db"), "h.db")
	})
}

func checkOpensExactly(t *testing.T, url, dir, want, name string) {
	t.Helper()
	ctx := context.Background()
	d, err := db.Open(ctx, url, db.Options{})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	defer d.Close()
	conn, err := d.SQL.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var file, mode string
	if err := conn.QueryRowContext(ctx, `SELECT file FROM pragma_database_list WHERE name = 'main'`).Scan(&file); err != nil {
		t.Fatal(err)
	}
	if file != want {
		t.Errorf("%s opened %q, want %q", url, file, want)
	}
	if err := conn.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" {
		t.Errorf("%s: journal_mode %q, want wal", url, mode)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TABLE t (x INTEGER)`); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); n != name && n != name+"-wal" && n != name+"-shm" {
			t.Errorf("%s created %q beside %q", url, n, name)
		}
	}
	if !slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == name }) {
		t.Errorf("%s: %q was not created", url, name)
	}
}

// TestSQLiteRefusesADirectoryOrMemory: a sqlite:PATH that names a directory, or ":memory:" (each
// pooled connection would hold a private database), is refused with an error that says so
// rather than SQLite's "out of memory (14)".
func TestSQLiteRefusesADirectoryOrMemory(t *testing.T) {
	dir := t.TempDir()
	for url, want := range map[string]string{
		"sqlite:" + dir:       "names a directory",
		"sqlite:" + dir + "/": "names a directory",
		"sqlite:":             "path is empty",
		"sqlite::memory:":     "sqlite::memory: is refused",
	} {
		d, err := db.Open(context.Background(), url, db.Options{})
		if err == nil {
			_ = d.Close()
			t.Errorf("%s opened", url)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "DATABASE_URL") {
			t.Errorf("%s: %v, want an error naming DATABASE_URL that says %q", url, err, want)
		}
	}
	if _, err := os.Stat(":memory:"); err == nil {
		t.Error("a file named :memory: was created")
	}
}

// TestANewSQLiteDatabaseIsReadableByItsOwnerOnly: the file, its write-ahead log and shared
// memory index hold password hashes, key hashes and sealed secrets: mode 0600, whatever the
// umask lets a plain create have (0644 under the usual 022).
func TestANewSQLiteDatabaseIsReadableByItsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "sluice.db")
	d, err := db.Open(context.Background(), "sqlite:"+path, db.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(context.Background()); err != nil { // writes: the -wal and -shm files exist
		t.Fatal(err)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %o, want 600", filepath.Base(f), mode)
		}
	}
}

// TestAnExistingSQLiteFileReadableByOthersIsWarnedOf: a database file made before Sluice created
// them 0600 keeps its mode, but the start warns that others can read it, naming the file.
func TestAnExistingSQLiteFileReadableByOthersIsWarnedOf(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o600, false}} {
		path := filepath.Join(dir, fmt.Sprintf("old-%o.db", c.mode))
		if err := os.WriteFile(path, nil, c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, c.mode); err != nil { // whatever the umask
			t.Fatal(err)
		}
		var log strings.Builder
		d, err := db.Open(context.Background(), "sqlite:"+path, db.Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
		warned := strings.Contains(log.String(), "level=WARN") && strings.Contains(log.String(), "chmod 600") && strings.Contains(log.String(), path)
		if warned != c.warn {
			t.Errorf("a file of mode %o: warned %v, want %v; the log:\n%s", c.mode, warned, c.warn, log.String())
		}
		if info, err := os.Stat(path); err != nil || info.Mode().Perm() != c.mode {
			t.Errorf("a file of mode %o was changed: %v, %v", c.mode, info.Mode().Perm(), err)
		}
	}
}
