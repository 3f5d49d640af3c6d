package ui

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// staticFiles serves web/static under /static/ with year-long, immutable caching under the URL
// of the content served (/static/NAME?v=HASH, which pages link: url), so a new binary with
// changed files changes the URLs and browsers never use a stale copy; any other URL of a file is
// served to be revalidated (no-cache, ETag).
type staticFiles struct {
	fsys    fs.FS
	version map[string]string // file name -> first 12 hex of its SHA-256
}

func newStaticFiles(fsys fs.FS) (*staticFiles, error) {
	s := &staticFiles{fsys: fsys, version: map[string]string{}}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := fsys.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		s.version[p] = hex.EncodeToString(h.Sum(nil))[:12]
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ui: static files: %w", err)
	}
	return s, nil
}

// url is the cache-busting URL of a static file.
func (s *staticFiles) url(name string) string {
	return "/static/" + name + "?v=" + s.version[name]
}

// serve answers GET/HEAD /static/*filepath. Directories and missing files are 404.
func (s *staticFiles) serve(c *gin.Context) {
	name := strings.TrimPrefix(path.Clean("/"+c.Param("filepath")), "/")
	if _, ok := s.version[name]; !ok {
		c.String(http.StatusNotFound, "404 page not found")
		return
	}
	f, err := s.fsys.Open(name)
	if err != nil {
		c.String(http.StatusNotFound, "404 page not found")
		return
	}
	defer f.Close()
	rs, ok := f.(io.ReadSeeker)
	if !ok {
		c.String(http.StatusInternalServerError, "internal error")
		return
	}
	// Immutable only under the URL of this very content: an old instance of a rolling deploy
	// asked for a new ?v= (or a page without one, such as /docs's) must not have its copy kept a
	// year under that URL; browsers revalidate those by the ETag.
	if c.Query("v") == s.version[name] {
		c.Header("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		c.Header("Cache-Control", "no-cache")
	}
	c.Header("ETag", `"`+s.version[name]+`"`)
	if strings.HasPrefix(name, "altcha/") {
		// Tenants' own pages load the widget from here as a module script, which browsers fetch
		// in CORS mode: the public widget files may be read from any origin.
		c.Header("Access-Control-Allow-Origin", "*")
		c.Header("Cross-Origin-Resource-Policy", "cross-origin")
	}
	// Embedded files have no modification time; ServeContent sets the type from the extension
	// and handles Range and If-None-Match.
	http.ServeContent(c.Writer, c.Request, name, time.Time{}, rs)
}
