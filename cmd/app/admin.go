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
	out := &checkedWriter{w: stdout}
	err = svc.Command(ctx, group, args, stdin, out)
	if errors.Is(err, tenants.ErrUnknownCommand) {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	if err == nil && out.err != nil {
		// What the command did stands; a script must not read its lost output as success.
		return fmt.Errorf("%s: the output could not be written (%w); the change was made", group, out.err)
	}
	return err
}

// checkedWriter remembers the first error of its writes.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	if err != nil && c.err == nil {
		c.err = err
	}
	return n, err
}
