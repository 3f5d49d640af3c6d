package migrations

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"strings"
	"testing"
)

// TestReleasedMigrationsNeverChange: every migration is listed in released.sha256 with the
// SHA-256 of its bytes, and matches it. A database records only a migration's version, so a
// migration edited after a database applied it leaves that database with another schema than
// the version says, which no later migration expects (it happened twice, to 00020 and 00022).
// A new migration is appended to the list (from this directory: sha256sum postgres/NNNNN_x.sql
// sqlite/NNNNN_x.sql >> released.sha256); a change to a listed one is a new migration instead.
func TestReleasedMigrationsNeverChange(t *testing.T) {
	f, err := os.Open("released.sha256")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		sum, name, ok := strings.Cut(s.Text(), "  ")
		if !ok {
			t.Fatalf("released.sha256: %q is not `sha256  path`", s.Text())
		}
		listed[name] = sum
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = fs.WalkDir(FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := FS.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		switch want, ok := listed[path]; {
		case !ok:
			t.Errorf("%s is not in released.sha256: append it (sha256sum %s >> released.sha256, from migrations/)", path, path)
		case want != hex.EncodeToString(sum[:]):
			t.Errorf("%s differs from the released file: a migration a database may have applied must not change; write a new migration instead", path)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(listed) {
		t.Errorf("released.sha256 lists %d migrations, the directory holds %d: a released migration must not be removed", len(listed), seen)
	}
}
