// Command gin is a small Gin service rate-limited by Sluice with the Gin middleware: each
// authenticated user may call GET /hello 5 times a minute. Authentication is a stand-in: the
// user is the X-User header.
//
// It needs a Sluice server and a tenant's secret key (see examples/README.md):
//
//	SLUICE_SECRET_KEY=sk_live_… go -C examples run ./gin
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	sluicegin "github.com/sluice-dev/sluice/client/gin"
	sluice "github.com/sluice-dev/sluice/client/go"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gin:", err)
		os.Exit(1)
	}
}

// limitName is the limit this service uses; run defines it at start-up.
const limitName = "examples.gin.hello"

func run(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	url, key, addr := getenv("SLUICE_URL"), getenv("SLUICE_SECRET_KEY"), getenv("ADDR")
	if url == "" {
		url = "http://localhost:8080"
	}
	if addr == "" {
		addr = "localhost:8082"
	}
	if key == "" {
		return errors.New("set SLUICE_SECRET_KEY to a tenant's secret key (sk_live_…)")
	}
	// Fail closed: when Sluice cannot answer within 500 ms, answer 503.
	client := sluice.New(url, key, sluice.WithTimeout(500*time.Millisecond), sluice.WithFailPolicy(sluice.FailClosed))
	if _, err := client.Put(ctx, limitName, sluice.Definition{Kind: sluice.TokenBucket, Rate: 5, Period: 60_000}); err != nil {
		return fmt.Errorf("define the limit %s: %w", limitName, err)
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	if err := r.SetTrustedProxies(nil); err != nil { // no proxy in front: trust none
		return err
	}
	r.Use(gin.Recovery(), authenticate)
	r.Use(sluicegin.Middleware(client, limitName, sluicegin.WithKeyFunc(sluicegin.KeyByContextValue("user"))))
	r.GET("/hello", func(c *gin.Context) {
		res, _ := sluicegin.ResultFromContext(c)
		c.String(http.StatusOK, "hello, %s (%.0f left this minute)\n", c.GetString("user"), res.Remaining)
	})

	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "listening on http://%s (try: curl -i -H 'X-User: ann' http://%s/hello)\n", l.Addr(), l.Addr())
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// authenticate stands in for real authentication: it takes the user from the X-User header and
// refuses a request without one.
func authenticate(c *gin.Context) {
	user := c.GetHeader("X-User")
	if user == "" {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "send X-User"})
		return
	}
	c.Set("user", user)
}
