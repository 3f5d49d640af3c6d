package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sluice-dev/sluice/internal/app"
	"github.com/sluice-dev/sluice/internal/config"
)

const usage = `usage: sluice [command]

commands:
  serve                                  run the service (default)
  migrate                                apply database migrations
  tenant create NAME                     create a tenant
  tenant list | rename NAME NEW-NAME | suspend NAME | resume NAME
                                         list, rename, suspend (every API key refused) or resume
  tenant delete NAME --yes               delete a tenant and every row it owns
  key list TENANT                        list a tenant's keys (id, kind, hint, state, label)
  key create --tenant NAME [--label L] [--publishable]
                                         create an API key (the secret is printed once)
  key revoke KEY                         revoke a key by its secret or its ID
  user create --email E --password-stdin [--operator | --tenant NAME [--role admin|viewer]]
                                         create a dashboard user (a member: admin unless --role)
  user list | remove EMAIL | passwd EMAIL
                                         list users, remove one (sessions end), or set a
                                         password read from stdin (sessions end)
  backup PATH                            copy the SQLite database, consistent while it serves,
                                         into a new file PATH (PostgreSQL: use pg_dump)
  healthcheck [--ready]                  probe the local server's /healthz (or /readyz)
  version                                print the build's version, revision and Go version
`

// run is the whole program: the command line. main and the end-to-end tests call it; `serve`
// hands over to the composition root, internal/app. The server and migrate log to stdout; the
// tenant, key and user commands, whose stdout scripts read (a new key's secret), log to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd, args := command(args)
	// Help where a command or its subcommand would begin is help, and nothing else runs:
	// `migrate --help` must not migrate, nor `tenant create --help` make a tenant called
	// "--help". Further on, -h is the subcommand's to read: a flag (its parser refuses the line
	// with its usage, on stderr) or a flag's value (`--label -h` is a label): printing the usage
	// to stdout with success there handed a script reading a new key's secret the usage instead.
	if helpAt(args, 0) || ((cmd == "tenant" || cmd == "key" || cmd == "user") && helpAt(args, 1)) {
		_, err := io.WriteString(stdout, usage)
		return err
	}
	if (cmd == "serve" || cmd == "migrate" || cmd == "version") && len(args) > 0 {
		return fmt.Errorf("%s takes no arguments (got %q)\n%s", cmd, args[0], usage)
	}
	if cmd == "version" { // needs no configuration
		version, revision, goVersion := app.BuildInfo()
		_, err := fmt.Fprintf(stdout, "sluice %s (revision %s, %s)\n", version, revision, goVersion)
		return err
	}
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, stdout)
	case "migrate":
		return migrateCmd(ctx, cfg, stdout)
	case "tenant", "key", "user":
		return adminCmd(ctx, cfg, cmd, args, stdin, stdout, stderr)
	case "healthcheck":
		return healthcheckCmd(ctx, cfg, args, stdout)
	case "backup":
		return backupCmd(ctx, cfg, args, stdout)
	case "help", "-h", "--help":
		_, _ = io.WriteString(stdout, usage)
		return nil
	default:
		return fmt.Errorf("unknown command %q\n%s", cmd, usage)
	}
}

// helpAt reports whether args[i] asks for help.
func helpAt(args []string, i int) bool {
	return i < len(args) && (args[i] == "-h" || args[i] == "-help" || args[i] == "--help")
}

// command splits the command line into its command (serve when there is none) and the
// command's arguments.
func command(args []string) (string, []string) {
	if len(args) == 0 {
		return "serve", nil
	}
	return args[0], args[1:]
}

func serve(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	a, err := app.New(ctx, cfg, app.Options{Stdout: stdout})
	if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Asked to stop while starting (waiting for another instance's migration): a stop,
		// not a failure, as it is once serving. Any other failure at that moment is one.
		app.NewLogger(cfg, stdout).Warn("stopped before serving", "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

func migrateCmd(ctx context.Context, cfg config.Config, stdout io.Writer) error {
	d, err := app.Open(ctx, cfg, app.NewLogger(cfg, stdout), true)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintln(stdout, "database schema is current")
	return nil
}
