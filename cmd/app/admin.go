package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// adminCmd runs the tenant, key and user subcommands (tenants.Service.Command) against the
// configured database. What opening it logs (a root secret an earlier version stored, removed
// or discarded) goes to stderr.
func adminCmd(ctx context.Context, cfg config.Config, group string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	d, keys, err := app.OpenForCommand(ctx, cfg, app.NewLogger(cfg, stderr))
	if err != nil {
		return err
	}
	defer d.Close()
	svc, err := app.CommandTenants(cfg, d, keys) // the CLI's keys count against the plan too
	if err != nil {
		return err
	}
	err = svc.Command(ctx, group, args, stdin, stdout)
	if errors.Is(err, tenants.ErrUnknownCommand) {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	return err
}
