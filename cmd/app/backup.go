package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
)

// backupCmd is `backup PATH`: app.Backup, then where the copy went and what to keep with it.
func backupCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	if len(args) != 1 || args[0] == "" {
		return fmt.Errorf("backup takes one argument, the new file to write\n%s", usage)
	}
	if strings.HasPrefix(args[0], "-") {
		// backup has no options: a mistyped one is not a file to make
		return fmt.Errorf("backup: %q is not an option backup knows (it has none); write ./%s for a file of that name", args[0], args[0])
	}
	path, err := app.Backup(ctx, cfg, args[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "database copied to %s; keep the root secret (%s, or SECRET_KEY) with your backups, stored apart from them\n",
		path, app.SecretFile(cfg.DatabaseURL))
	return nil
}
