package ui_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-dev/sluice/internal/limiter"
	"github.com/sluice-dev/sluice/internal/testkit"
)

// postAtOnce sends forms (path -> form, in order) together and returns their statuses.
func postAtOnce(t *testing.T, c *client, paths []string, forms []url.Values) []int {
	t.Helper()
	statuses := make([]int, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range paths {
		req, _ := http.NewRequest(http.MethodPost, c.e.url+paths[i], strings.NewReader(forms[i].Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		wg.Go(func() {
			<-start
			res, err := c.c.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			statuses[i] = res.StatusCode
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("POST %s: %v", paths[i], err)
		}
	}
	return statuses
}

// TestConcurrentCreatesOfOneNameMakeOneLimit: creates of one name sent at once from the
// dashboard make one limit: one is saved (303), every other is told the name exists (422),
// the stored definition is the saved one's and the audit log has one limit.create. The form's
// check before writing alone let several pass it and the later ones silently replace the
// first. On both dialects, several rounds.
func TestConcurrentCreatesOfOneNameMakeOneLimit(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		tn := e.tenant("acme")
		c := e.login(opEmail, opPassword)
		ctx := context.Background()
		const rounds, creates = 8, 6
		for round := range rounds {
			name := fmt.Sprintf("race-%d", round)
			var paths []string
			var forms []url.Values
			for i := range creates {
				paths, forms = append(paths, tpath(tn, "/limits")), append(forms, limitForm(name, strconv.Itoa(10+i)))
			}
			statuses := postAtOnce(t, c, paths, forms)
			winner := -1
			for i, st := range statuses {
				switch {
				case st == http.StatusSeeOther && winner >= 0:
					t.Fatalf("round %d: creates %d and %d of %q were both saved (statuses %v): the second replaced the first", round, winner, i, name, statuses)
				case st == http.StatusSeeOther:
					winner = i
				case st != http.StatusUnprocessableEntity:
					t.Fatalf("round %d, create %d: status %d, want 303 or 422 (statuses %v)", round, i, st, statuses)
				}
			}
			if winner < 0 {
				t.Fatalf("round %d: no create of %q was saved (statuses %v)", round, name, statuses)
			}
			d, err := e.engine.GetDefinition(ctx, tn.ID, name)
			if err != nil || d.Definition.Rate != float64(10+winner) {
				t.Fatalf("round %d: stored %+v (%v), want the saved create's rate %d", round, d.Definition, err, 10+winner)
			}
			entries, err := e.svc.AuditLog(ctx, tn.ID, 1000)
			if err != nil {
				t.Fatal(err)
			}
			made := 0
			for _, a := range entries {
				if a.Target == name && strings.HasPrefix(a.Action, "limit.") {
					made++
				}
			}
			if made != 1 {
				t.Fatalf("round %d: %d audit entries for %q, want one limit.create", round, made, name)
			}
		}
	})
}

// TestAnEditNeverRecreatesALimitDeletedMeanwhile: an edit and a delete of one limit sent at
// once leave no limit behind when the delete was done: the edit either came first (and the
// delete removed it) or found the limit gone (404 before the form's check, 409 after it);
// the form's check before writing alone let an edit that passed it re-create the limit.
func TestAnEditNeverRecreatesALimitDeletedMeanwhile(t *testing.T) {
	testkit.EachURL(t, func(t *testing.T, dbURL string) {
		e := newEnv(t, onDatabase(dbURL))
		e.operator()
		tn := e.tenant("acme")
		c := e.login(opEmail, opPassword)
		ctx := context.Background()
		for round := range 12 {
			name := fmt.Sprintf("gone-%d", round)
			wantStatus(t, c.post(tpath(tn, "/limits"), limitForm(name, "10")), http.StatusSeeOther)
			// The edit sent a little ahead of the delete in odd rounds, behind it in even ones.
			paths := []string{tpath(tn, "/limits/"+name), tpath(tn, "/limits/"+name+"/delete")}
			forms := []url.Values{limitForm("", "20"), {"confirm": {"yes"}}}
			if round%2 == 0 {
				paths[0], paths[1], forms[0], forms[1] = paths[1], paths[0], forms[1], forms[0]
			}
			statuses := postAtOnce(t, c, paths, forms)
			_, err := e.engine.GetDefinition(ctx, tn.ID, name)
			if err == nil {
				t.Fatalf("round %d: %q exists after an edit and a delete sent at once (statuses %v for %v)", round, name, statuses, paths)
			}
			if !limiter.IsNotFound(err) {
				t.Fatal(err)
			}
		}
	})
}
