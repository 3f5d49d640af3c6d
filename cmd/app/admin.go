package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
	"github.com/sluice-dev/sluice/internal/tenants"
)

// adminCmd runs the tenant, key and user subcommands against the configured database.
func adminCmd(ctx context.Context, cfg config.Config, group string, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%s: missing subcommand\n%s", group, usage)
	}
	sub, args := args[0], args[1:]
	d, err := app.Open(ctx, cfg, app.NewLogger(cfg, io.Discard), false)
	if err != nil {
		return err
	}
	defer d.Close()
	keys, err := app.LoadSecrets(ctx, cfg, d, app.NewLogger(cfg, io.Discard))
	if err != nil {
		return err
	}
	svc := tenants.NewService(d, keys.Pepper, nil, app.DefaultPlan(cfg)) // the CLI's keys count too
	const actor = "cli"

	switch group + " " + sub {
	case "tenant create":
		if len(args) != 1 {
			return errors.New("usage: app tenant create NAME")
		}
		t, err := svc.CreateTenant(ctx, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tenant %q created (id %d)\n", t.Name, t.ID)
		return nil

	case "tenant list":
		ts, err := svc.ListTenants(ctx)
		for _, t := range ts {
			fmt.Fprintf(stdout, "%d\t%s\t%s\n", t.ID, t.Name, map[bool]string{true: "suspended", false: "active"}[t.SuspendedAt != nil])
		}
		return err
	case "tenant rename", "tenant suspend", "tenant resume":
		if (sub == "rename") != (len(args) == 2) || len(args) == 0 || len(args) > 2 {
			return errors.New("usage: app tenant rename NAME NEW-NAME | app tenant suspend NAME | app tenant resume NAME")
		}
		t, err := svc.TenantByName(ctx, args[0])
		if err != nil {
			return fmt.Errorf("tenant %q: %w", args[0], err)
		}
		if sub == "rename" {
			err = svc.RenameTenant(ctx, t.ID, args[1], actor)
		} else {
			err = svc.SetSuspended(ctx, t.ID, sub == "suspend", actor)
		}
		return err

	case "key list":
		if len(args) != 1 {
			return errors.New("usage: app key list TENANT")
		}
		t, err := svc.TenantByName(ctx, args[0])
		if err != nil {
			return fmt.Errorf("tenant %q: %w", args[0], err)
		}
		ks, err := svc.ListKeys(ctx, t.ID)
		for _, k := range ks {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Kind, k.Hint, map[bool]string{true: "revoked", false: "active"}[k.RevokedAt != nil], k.Label)
		}
		return err

	case "key create":
		fs := flag.NewFlagSet("key create", flag.ContinueOnError)
		fs.SetOutput(stdout)
		tenantName := fs.String("tenant", "", "tenant name (required)")
		label := fs.String("label", "", "a label for the key")
		publishable := fs.Bool("publishable", false, "create a publishable (pk_live_) key for the captcha widget")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *tenantName == "" {
			return errors.New("usage: app key create --tenant NAME [--label L] [--publishable]")
		}
		t, err := svc.TenantByName(ctx, *tenantName)
		if err != nil {
			return fmt.Errorf("tenant %q: %w", *tenantName, err)
		}
		kind := tenants.KindSecret
		if *publishable {
			kind = tenants.KindPublishable
		}
		k, secret, err := svc.CreateKey(ctx, t.ID, kind, *label, actor)
		if err != nil {
			return err
		}
		// The secret alone on stdout's first line, so scripts can capture it; shown only this once.
		fmt.Fprintln(stdout, secret)
		fmt.Fprintf(stdout, "# key %s for tenant %q; store the secret now, it is not shown again\n", k.ID, t.Name)
		return nil

	case "key revoke":
		if len(args) != 1 {
			return errors.New("usage: app key revoke KEY (the secret or the key ID)")
		}
		k, err := svc.RevokeKeyAnyTenant(ctx, args[0], actor)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key %s revoked\n", k.ID)
		return nil

	case "user create":
		fs := flag.NewFlagSet("user create", flag.ContinueOnError)
		fs.SetOutput(stdout)
		email := fs.String("email", "", "login email (required)")
		fromStdin := fs.Bool("password-stdin", false, "read the password from standard input (required)")
		operator := fs.Bool("operator", false, "an operator (all tenants)")
		tenantName := fs.String("tenant", "", "a member of this tenant")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *email == "" || !*fromStdin || *operator == (*tenantName != "") {
			return errors.New("usage: app user create --email E --password-stdin [--operator | --tenant NAME]")
		}
		line, err := bufio.NewReader(stdin).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read password: %w", err)
		}
		password := strings.TrimRight(line, "\r\n")
		var tenantID *int64
		if *tenantName != "" {
			t, err := svc.TenantByName(ctx, *tenantName)
			if err != nil {
				return fmt.Errorf("tenant %q: %w", *tenantName, err)
			}
			tenantID = &t.ID
		}
		u, err := svc.CreateUser(ctx, *email, password, *operator, tenantID)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s created (id %d)\n", u.Email, u.ID)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", group+" "+sub, usage)
}
