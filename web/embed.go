// Package web embeds the dashboard's and demo's static files (CSS, vendored htmx and ALTCHA,
// small scripts) into the binary, so that a deployment is one file and nothing loads from a CDN.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var files embed.FS

// Static returns web/static as a file system rooted at that directory ("app.css",
// "htmx/htmx.min.js", ...).
func Static() fs.FS {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // cannot happen: the directory is embedded at build time
	}
	return sub
}
