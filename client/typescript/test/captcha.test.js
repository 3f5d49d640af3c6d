// The captcha helper's tests under Node (which has fetch and Web Crypto), against a real Sluice
// (see server.js): the helper plays the page, the Sluice client with the secret key the tenant's
// backend.
import assert from "node:assert/strict";
import { createHash, webcrypto } from "node:crypto";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { Sluice, SluiceError } from "../src/index.js";
import { CaptchaError, encodePayload, fetchChallenge, newSessionId, solveCaptcha, solveChallenge } from "../src/captcha.js";
import { startSluice } from "./server.js";

// The helper uses the global Web Crypto of browsers, which Node has from 19 on (Debian's Node 18
// has it behind a flag).
globalThis.crypto ??= webcrypto;

let sluice; // { baseUrl, secretKey, publishableKey, stop }
let backend; // the tenant's backend: a Sluice client with the secret key

before(async () => {
  sluice = await startSluice();
  backend = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey });
});

after(async () => {
  await sluice?.stop();
});

/** A limit that sessions are decided under: one token per minute. */
async function sessionLimit(what) {
  const name = `ts.captcha.${what}`;
  await backend.putLimit(name, { kind: "token bucket", rate: 1, period: 60_000 });
  return name;
}

function jwtClaims(token) {
  const [, claims] = token.split(".");
  return JSON.parse(Buffer.from(claims, "base64url").toString());
}

test("the helper solves a challenge and the backend authorizes the session with it", async () => {
  const name = await sessionLimit("flow");
  const sessionId = newSessionId();
  assert.match(sessionId, /^[A-Za-z0-9_-]{22}$/);

  // Before the captcha, a session cannot be decided.
  const before = await backend.limit(name, { session: sessionId }).catch((e) => e);
  assert.ok(before instanceof SluiceError && before.code === "session_not_authorized", `before: ${before}`);

  const { sessionId: sid, authorization } = await solveCaptcha({
    baseUrl: sluice.baseUrl,
    publishableKey: sluice.publishableKey,
    sessionId,
    submit: (s) => backend.authorizeSession(s.sessionId, s.payload),
  });
  assert.equal(sid, sessionId);
  assert.equal(authorization.authorized, true);
  assert.ok(Date.parse(authorization.expiresAt) > Date.now(), `expiresAt ${authorization.expiresAt}`);
  assert.equal(jwtClaims(authorization.token).sub, createHash("sha256").update(sessionId).digest("hex"));

  const s = await backend.getSession(sessionId);
  assert.equal(s.sessionId, sessionId);
  assert.equal(s.authorized, true);
  assert.equal((await backend.limit(name, { session: sessionId })).ok, true);
  assert.equal((await backend.limit(name, { session: sessionId })).ok, false, "the session has its own budget, now spent");

  await backend.revokeSession(sessionId);
  const revoked = await backend.limit(name, { session: sessionId }).catch((e) => e);
  assert.ok(revoked instanceof SluiceError && revoked.code === "session_not_authorized", `after revoking: ${revoked}`);
  assert.equal((await backend.getSession(sessionId).catch((e) => e)).code, "not_found");
});

test("the default submit posts {sessionId, payload} to the tenant's backend and returns its JSON", async (t) => {
  const seen = [];
  const server = createServer(async (req, res) => {
    let body = "";
    for await (const chunk of req) body += chunk;
    seen.push({ method: req.method, url: req.url, type: req.headers["content-type"], body: JSON.parse(body) });
    const { sessionId, payload } = JSON.parse(body);
    try {
      const a = await backend.authorizeSession(sessionId, payload);
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify({ ok: true, expiresAt: a.expiresAt }));
    } catch (err) {
      res.statusCode = err.status ?? 500;
      res.setHeader("Content-Type", "application/problem+json");
      res.end(JSON.stringify({ code: err.code, detail: err.detail }));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const submit = `http://127.0.0.1:${server.address().port}/captcha/solved`;

  const r = await solveCaptcha({ baseUrl: sluice.baseUrl, publishableKey: sluice.publishableKey, submit });
  assert.equal(r.authorization.ok, true);
  assert.equal((await backend.getSession(r.sessionId)).authorized, true);
  assert.equal(seen.length, 1);
  assert.equal(seen[0].method, "POST");
  assert.equal(seen[0].url, "/captcha/solved");
  assert.equal(seen[0].type, "application/json");
  assert.deepEqual(Object.keys(seen[0].body).sort(), ["payload", "sessionId"]);

  // The backend refusing (here: the same payload again, which Sluice accepts once) is a CaptchaError.
  const replay = await solveCaptcha({
    baseUrl: sluice.baseUrl,
    publishableKey: sluice.publishableKey,
    sessionId: r.sessionId,
    submit: () => backend.authorizeSession(r.sessionId, seen[0].body.payload),
  }).catch((e) => e);
  assert.ok(replay instanceof SluiceError && replay.status === 409, `a replayed payload: ${replay}`);
  const viaBackend = await fetch(submit, { method: "POST", body: JSON.stringify(seen[0].body) });
  assert.equal(viaBackend.status, 409);
});

test("a solution is only accepted for the challenge's own counter", async () => {
  const sessionId = newSessionId();
  const ch = await fetchChallenge(sluice.baseUrl, sluice.publishableKey, sessionId);
  assert.equal(ch.parameters.algorithm, "SHA-256");
  const solution = await solveChallenge(ch);
  assert.ok(solution.counter >= 0 && solution.counter <= Number(ch.parameters.data.maxNumber), `counter ${solution.counter}`);
  assert.match(solution.derivedKey, new RegExp(`^${ch.parameters.keyPrefix}[0-9a-f]{32}$`));

  const wrong = encodePayload(ch, { ...solution, counter: solution.counter + 1 });
  const e = await backend.authorizeSession(sessionId, wrong).catch((err) => err);
  assert.ok(e instanceof SluiceError && e.status === 400, `a wrong counter: ${e}`);
  assert.equal((await backend.authorizeSession(sessionId, encodePayload(ch, solution))).authorized, true);
});

test("bad arguments are refused before sending, and Sluice's refusals are CaptchaErrors", async () => {
  let calls = 0;
  const counting = (input, init) => {
    calls++;
    return fetch(input, init);
  };
  const base = { baseUrl: sluice.baseUrl, publishableKey: sluice.publishableKey, submit: () => assert.fail("submitted"), fetch: counting };
  await assert.rejects(solveCaptcha({ ...base, sessionId: "short" }), TypeError);
  await assert.rejects(solveCaptcha({ ...base, publishableKey: sluice.secretKey }), /publishable key/);
  assert.equal(calls, 0, "nothing was sent");

  const unknown = await solveCaptcha({ ...base, publishableKey: "pk_live_doesnotexist" }).catch((e) => e);
  assert.ok(unknown instanceof CaptchaError, `${unknown}`);
  assert.equal(unknown.status, 401);
  assert.equal(unknown.code, "unauthorized");
  assert.match(unknown.message, /^sluice captcha: challenge: 401 unauthorized: /);

  const abort = new AbortController();
  abort.abort(new Error("the visitor left"));
  await assert.rejects(solveCaptcha({ ...base, fetch: undefined, signal: abort.signal }), /the visitor left/);
});
