package api_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sluice-dev/sluice/internal/api"
	"github.com/sluice-dev/sluice/internal/captcha"
)

// The captcha package's errors carry their problems as data (apperr); these are the answers the
// API gave for them when it mapped them itself, and must keep giving, however wrapped.
func TestCaptchaErrorsAnswerTheProblemsTheyAlwaysHad(t *testing.T) {
	bad := func(field, detail string) api.Problem {
		p := api.NewProblem(400, api.CodeInvalidRequest, detail)
		p.Field = field
		return p
	}
	for _, tc := range []struct {
		err  error
		want api.Problem
	}{
		{captcha.ErrReplay, api.NewProblem(409, api.CodeConflict, "this challenge has already been used to authorize a session; solve a new one")},
		{captcha.ErrNotFound, api.NewProblem(404, api.CodeNotFound, "no active authorization for this session")},
		{captcha.ErrInvalidSessionID, bad("sessionId", "session IDs are 16 to 128 characters of [A-Za-z0-9_-]")},
		{captcha.ErrPayloadTooLarge, bad("payload", fmt.Sprintf("the payload is longer than %d bytes", captcha.MaxPayloadSize))},
		{captcha.ErrMalformedPayload, bad("payload", "the payload is not a solved challenge (base64 of the widget's JSON)")},
		{captcha.ErrTestMode, bad("payload", "the widget ran in test mode and solved nothing")},
		{captcha.ErrAlgorithm, bad("payload", "the challenge uses an algorithm this server does not issue")},
		{captcha.ErrSignature, bad("payload", "the challenge was not issued by this server, or was altered")},
		{captcha.ErrWrongSolution, bad("payload", "the solution does not solve the challenge")},
		{captcha.ErrExpired, bad("payload", "the challenge has expired; solve a new one")},
		{captcha.ErrDifficulty, bad("payload", "the challenge was issued at a lower difficulty than the tenant now requires; solve a new one")},
		{captcha.ErrWrongTenant, bad("payload", "the challenge was issued for another tenant")},
		{captcha.ErrWrongSession, bad("sessionId", "the challenge was issued for another session ID")},
	} {
		got := api.ProblemFor(fmt.Errorf("captcha: verify: %w", tc.err))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v:\n got %+v\nwant %+v", tc.err, got, tc.want)
		}
	}
}
