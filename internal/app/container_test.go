package app_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestContainerBuildExcludesSecretsAndRunsAsNonRoot reads the Dockerfile and .dockerignore: the
// build context never carries a local database, its key file or an env file (in any directory) or
// a built binary, and the image runs as a non-root user.
func TestContainerBuildExcludesSecretsAndRunsAsNonRoot(t *testing.T) {
	root := filepath.Join("..", "..")
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]bool{}
	for _, line := range strings.Split(string(ignore), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns[line] = true
		}
	}
	// Docker matches a pattern without **/ only at the root of the context: a database, key file
	// or env file in a subdirectory (examples/data/…) must be excluded too.
	for _, want := range []string{"**/data/", "**/*.db", "**/*.db-wal", "**/*.db-shm", "**/*.secret", "**/.env", "**/.env.*",
		"bin/", "/app", "/sluice", ".git"} {
		if !patterns[want] {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(string(dockerfile), -1)
	if len(users) == 0 {
		t.Fatal("the Dockerfile sets no USER: the image would run as root")
	}
	if last := users[len(users)-1][1]; last == "root" || last == "0" || strings.HasPrefix(last, "0:") {
		t.Fatalf("the image runs as %s", last)
	}
}
