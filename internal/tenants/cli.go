package tenants

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// parseFlags parses a subcommand's flags. What the flag package would print (the problem and the
// usage, or the usage for -h) becomes the error, which the caller writes on standard error: a
// script that takes the secret from stdout's first line must never read a usage line instead.
// A word left over (an unquoted label of two words) is an error, not dropped.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var out strings.Builder
	fs.SetOutput(&out)
	if err := fs.Parse(args); err != nil {
		return errors.New(strings.TrimSpace(out.String()))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q (quote a value with spaces)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// tenantNamed is TenantByName for a command line: a name that names no tenant says so plainly.
func (s *Service) tenantNamed(ctx context.Context, name string) (Tenant, error) {
	t, err := s.TenantByName(ctx, name)
	if errors.Is(err, ErrNotFound) {
		return Tenant{}, fmt.Errorf("no tenant named %q", name)
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("tenant %q: %w", name, err)
	}
	return t, nil
}

// nameTaken says plainly that a tenant name is taken when err is ErrConflict; any other err is
// returned as it is.
func nameTaken(err error, name string) error {
	if errors.Is(err, ErrConflict) {
		return fmt.Errorf("a tenant named %q already exists (names are compared ignoring case)", name)
	}
	return err
}

// ErrUnknownCommand is what Command returns for a command it does not know.
var ErrUnknownCommand = errors.New("unknown command")

// Command runs one command line of the CLI's tenant, key and user groups (group is "tenant",
// "key" or "user"; args start with the subcommand), as the actor "cli". Secrets it creates and
// lists it prints go to stdout; passwords are read from stdin, never from the arguments.
func (s *Service) Command(ctx context.Context, group string, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%s: missing subcommand: %w", group, ErrUnknownCommand)
	}
	sub, args := args[0], args[1:]
	const actor = "cli"
	// Only key create, user create and tenant delete's --yes take flags: anywhere else a word
	// that starts with "-" is a mistyped flag, not a name to create, rename or suspend.
	command := group + " " + sub
	if command != "key create" && command != "user create" {
		for _, a := range args {
			confirms := command == "tenant delete" && (a == "--yes" || a == "-yes")
			if strings.HasPrefix(a, "-") && !confirms {
				return fmt.Errorf("%s %s: unexpected flag %q (names that start with - are refused here)", group, sub, a)
			}
		}
	}

	switch command {
	case "tenant create":
		if len(args) != 1 {
			return errors.New("usage: sluice tenant create NAME")
		}
		t, err := s.CreateTenantBy(ctx, args[0], actor) // audited in its log and the security log
		if err != nil {
			return nameTaken(err, args[0])
		}
		fmt.Fprintf(stdout, "tenant %q created (id %d)\n", t.Name, t.ID)
		return nil

	case "tenant list":
		ts, err := s.ListTenants(ctx)
		for _, t := range ts {
			fmt.Fprintf(stdout, "%d\t%s\t%s\n", t.ID, t.Name, t.State())
		}
		return err
	case "tenant rename", "tenant suspend", "tenant resume":
		if (sub == "rename") != (len(args) == 2) || len(args) == 0 || len(args) > 2 {
			return errors.New("usage: sluice tenant rename NAME NEW-NAME | sluice tenant suspend NAME | sluice tenant resume NAME")
		}
		t, err := s.tenantNamed(ctx, args[0])
		if err != nil {
			return err
		}
		if sub == "rename" {
			err = nameTaken(s.RenameTenant(ctx, t.ID, args[1], actor), args[1])
		} else {
			err = s.SetSuspended(ctx, t.ID, sub == "suspend", actor)
		}
		if err != nil {
			return err
		}
		if sub == "rename" {
			fmt.Fprintf(stdout, "tenant %q renamed to %q\n", t.Name, args[1])
		} else {
			fmt.Fprintf(stdout, "tenant %q %s\n", t.Name, map[string]string{"suspend": "suspended", "resume": "resumed"}[sub])
		}
		return nil

	case "key list":
		if len(args) != 1 {
			return errors.New("usage: sluice key list TENANT")
		}
		t, err := s.tenantNamed(ctx, args[0])
		if err != nil {
			return err
		}
		ks, err := s.ListKeys(ctx, t.ID)
		for _, k := range ks {
			fmt.Fprintf(stdout, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Kind, k.Hint, map[bool]string{true: "revoked", false: "active"}[k.RevokedAt != nil], k.Label)
		}
		return err

	case "key create":
		fs := flag.NewFlagSet("key create", flag.ContinueOnError)
		tenantName := fs.String("tenant", "", "tenant name (required)")
		label := fs.String("label", "", "a label for the key")
		publishable := fs.Bool("publishable", false, "create a publishable (pk_live_) key for the captcha widget")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *tenantName == "" {
			return errors.New("usage: sluice key create --tenant NAME [--label L] [--publishable]")
		}
		t, err := s.tenantNamed(ctx, *tenantName)
		if err != nil {
			return err
		}
		kind := KindSecret
		if *publishable {
			kind = KindPublishable
		}
		k, secret, err := s.CreateKey(ctx, t.ID, kind, *label, actor)
		if err != nil {
			return err
		}
		// The secret alone on stdout's first line, so scripts can capture it; shown only this once.
		if _, werr := fmt.Fprintln(stdout, secret); werr != nil && kind == KindSecret {
			// No one has the secret (stdout full, closed): a key no one can use must not stay
			// active, nor count against the plan.
			if _, _, rerr := s.RevokeKeyAnyTenant(ctx, k.ID, actor); rerr != nil {
				return fmt.Errorf("key create: the secret could not be written (%w), and revoking key %s again failed (%w): revoke it", werr, k.ID, rerr)
			}
			return fmt.Errorf("key create: the secret could not be written (%w); key %s was revoked again, since no one has its secret", werr, k.ID)
		}
		fmt.Fprintf(stdout, "# key %s for tenant %q; store the secret now, it is not shown again\n", k.ID, t.Name)
		return nil

	case "key revoke":
		if len(args) != 1 {
			return errors.New("usage: sluice key revoke KEY (the secret or the key ID)")
		}
		k, revokedNow, err := s.RevokeKeyAnyTenant(ctx, args[0], actor)
		if err != nil {
			return err
		}
		if !revokedNow {
			fmt.Fprintf(stdout, "key %s was already revoked (%s); nothing changed\n", k.ID, k.RevokedAt.Format(time.RFC3339))
			return nil
		}
		fmt.Fprintf(stdout, "key %s revoked\n", k.ID)
		return nil

	case "user create":
		fs := flag.NewFlagSet("user create", flag.ContinueOnError)
		email := fs.String("email", "", "login email (required)")
		fromStdin := fs.Bool("password-stdin", false, "read the password from standard input (required)")
		operator := fs.Bool("operator", false, "an operator (all tenants)")
		tenantName := fs.String("tenant", "", "a member of this tenant")
		role := fs.String("role", "", "the member's role: admin (the default) or viewer")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *email == "" || !*fromStdin || *operator == (*tenantName != "") || (*role != "" && *tenantName == "") {
			return errors.New("usage: sluice user create --email E --password-stdin [--operator | --tenant NAME [--role admin|viewer]]")
		}
		if *role == "" {
			*role = string(RoleAdmin)
		}
		if *role != string(RoleAdmin) && *role != string(RoleViewer) {
			return fmt.Errorf("--role %q: a member's role is admin or viewer", *role)
		}
		password, err := readLine(stdin)
		if err != nil {
			return err
		}
		var tenantID *int64
		if *tenantName != "" {
			t, err := s.tenantNamed(ctx, *tenantName)
			if err != nil {
				return err
			}
			tenantID = &t.ID
		}
		var u User
		if tenantID != nil {
			u, err = s.CreateMember(ctx, *email, password, *tenantID, Role(*role), actor, "")
		} else {
			u, err = s.CreateUser(ctx, *email, password, true, nil, actor, "")
		}
		if errors.Is(err, ErrConflict) {
			return fmt.Errorf("a user with the email %q already exists (emails are compared ignoring case)", *email)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s created (id %d)\n", u.Email, u.ID)
		return nil

	case "tenant delete":
		name, yes := "", false
		for _, a := range args {
			if a == "--yes" || a == "-yes" {
				yes = true
			} else if name == "" {
				name = a
			} else {
				name = "\x00" // two names: usage
			}
		}
		if name == "" || strings.Contains(name, "\x00") || !yes {
			return errors.New("usage: sluice tenant delete NAME --yes (every row of the tenant is deleted; --yes confirms)")
		}
		t, err := s.tenantNamed(ctx, name)
		if err != nil {
			return err
		}
		if err := s.DeleteTenant(ctx, t.ID, actor); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "tenant %q deleted\n", t.Name)
		return nil

	case "user list":
		if len(args) != 0 {
			return errors.New("usage: sluice user list")
		}
		return s.listUsersCommand(ctx, stdout)

	case "user remove", "user passwd":
		if len(args) != 1 {
			return errors.New("usage: sluice user remove EMAIL | sluice user passwd EMAIL (the new password on stdin)")
		}
		u, err := s.UserByEmail(ctx, args[0])
		if err != nil {
			return fmt.Errorf("user %q: %w", args[0], err)
		}
		if sub == "remove" {
			if err := s.RemoveUser(ctx, nil, u.ID, actor); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "user %s removed\n", u.Email)
			return nil
		}
		password, err := readLine(stdin)
		if err != nil {
			return err
		}
		if err := s.SetPassword(ctx, u.ID, password, actor); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "password of %s changed; their sessions ended\n", u.Email)
		return nil
	}
	return fmt.Errorf("%s %s: %w", group, sub, ErrUnknownCommand)
}

// readLine reads a password: the first line of r, without its line ending.
func readLine(r io.Reader) (string, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read password: %w", err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// listUsersCommand prints every user: ID, email, role, tenant ("-" for operators), state.
func (s *Service) listUsersCommand(ctx context.Context, stdout io.Writer) error {
	users, err := s.ListUsers(ctx, nil)
	if err != nil {
		return err
	}
	ts, err := s.ListTenants(ctx)
	if err != nil {
		return err
	}
	names := map[int64]string{}
	for _, t := range ts {
		names[t.ID] = t.Name
	}
	for _, u := range users {
		tenant, state := "-", "active"
		if u.TenantID != nil {
			tenant = names[*u.TenantID]
		}
		if u.DisabledAt != nil {
			state = "disabled"
		}
		fmt.Fprintf(stdout, "%d\t%s\t%s\t%s\t%s\n", u.ID, u.Email, u.Role, tenant, state)
	}
	return nil
}
