package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/sluice-dev/sluice/internal/config"
)

// healthcheckCmd is `app healthcheck [--ready]`: it asks the server listening on LISTEN_ADDR for
// /healthz (or /readyz) and fails unless it answers 200. Distroless images have no shell or
// curl, so the Dockerfile's HEALTHCHECK runs the binary itself.
func healthcheckCmd(ctx context.Context, cfg config.Config, args []string, stdout io.Writer) error {
	path := "/healthz"
	for _, a := range args {
		switch a {
		case "--ready", "-ready":
			path = "/readyz"
		default:
			return fmt.Errorf("usage: sluice healthcheck [--ready]")
		}
	}
	host, port, err := net.SplitHostPort(cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("healthcheck: LISTEN_ADDR: %w", err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1" // listening on every interface: loopback is one of them
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthcheck: %s answered %d", path, resp.StatusCode)
	}
	fmt.Fprintf(stdout, "%s ok\n", path)
	return nil
}
