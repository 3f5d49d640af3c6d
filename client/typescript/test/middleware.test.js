// The middleware's tests: a node:http server and a real Express app in front of a real Sluice
// (see server.js), called over HTTP with fetch.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { connect } from "node:net";
import { after, before, test } from "node:test";

import express from "express";

import { Sluice } from "../src/index.js";
import { KeyError, keyByClientIP, keyByHeader, keyByUser, rateLimit } from "../src/middleware.js";
import { freeAddr, startSluice } from "./server.js";

let sluice; // { baseUrl, secretKey, stop }
const servers = [];

before(async () => {
  sluice = await startSluice();
});

after(async () => {
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  await sluice?.stop();
});

function client(opts = {}) {
  return new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey, ...opts });
}

let names = 0;
/** A token bucket of capacity tokens per minute, under a name of its own. */
async function bucket(what, capacity) {
  const name = `ts.mw.${what}.${++names}`;
  await client().putLimit(name, { kind: "token bucket", rate: capacity, period: 60_000 });
  return name;
}

/** Serves handler (a node:http listener or an Express app) on a loopback port; returns its URL. */
async function serve(handler) {
  const s = createServer(handler);
  servers.push(s);
  await new Promise((resolve) => s.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${s.address().port}`;
}

/** A node:http server that runs mw, then answers 200 with what the middleware left in req.sluice. */
function plain(mw) {
  return serve((req, res) => {
    mw(req, res, (err) => {
      if (err) {
        res.statusCode = 599;
        res.end(String(err));
        return;
      }
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify({ passed: true, sluice: req.sluice ?? null }));
    });
  });
}

async function get(url, headers = {}) {
  const r = await fetch(url, { headers });
  const text = await r.text();
  const json = /json/.test(r.headers.get("Content-Type") ?? "") ? JSON.parse(text) : undefined;
  return { status: r.status, headers: r.headers, text, json };
}

test("node:http: admits up to the limit, then 429 with a problem, Retry-After and the RateLimit headers", async () => {
  const name = await bucket("http", 2);
  const url = await plain(rateLimit({ client: client(), name }));
  for (let i = 0; i < 2; i++) {
    const r = await get(url);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.sluice.ok, true);
    assert.equal(r.json.sluice.key, "127.0.0.1", "the default key is the peer's address");
    assert.equal(r.headers.get("RateLimit-Policy"), `"${name}";q=2;w=60`);
    assert.match(r.headers.get("RateLimit"), new RegExp(`^"${name.replaceAll(".", "\\.")}";r=${1 - i}(;|$)`));
    assert.equal(r.headers.get("Retry-After"), null);
  }
  const refused = await get(url);
  assert.equal(refused.status, 429, refused.text);
  assert.equal(refused.headers.get("Content-Type"), "application/problem+json");
  assert.equal(refused.headers.get("Cache-Control"), "no-store");
  assert.equal(refused.headers.get("RateLimit-Policy"), `"${name}";q=2;w=60`);
  assert.match(refused.headers.get("RateLimit"), /;r=0(;|$)/);
  // A token every 30 s: the wait is up to 30 s, in whole seconds.
  const retryAfter = Number(refused.headers.get("Retry-After"));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 30, `Retry-After ${refused.headers.get("Retry-After")}`);
  assert.equal(refused.json.status, 429);
  assert.equal(refused.json.code, "rate_limited");
  assert.equal(refused.json.name, name);
  assert.ok(refused.json.retryAfter > 0 && refused.json.retryAfter <= 30_000, `retryAfter ${refused.json.retryAfter}`);
  assert.ok(Math.ceil(refused.json.retryAfter / 1000) === retryAfter, "the header is the body's wait in seconds, rounded up");
});

test("a header key, a count function and a handler that replaces the 429", async () => {
  const name = await bucket("header", 3);
  const url = await plain(
    rateLimit({
      client: client(),
      name,
      key: keyByHeader("X-Tenant"),
      count: (req) => Number(req.headers["x-cost"] ?? 1),
      handler: (req, res) => {
        res.statusCode = 429;
        res.setHeader("Content-Type", "text/plain");
        res.end(`slow down, ${req.sluice.key}`);
      },
    }),
  );
  assert.equal((await get(url, { "X-Tenant": "a", "X-Cost": "3" })).status, 200);
  const refused = await get(url, { "X-Tenant": "a" });
  assert.equal(refused.status, 429);
  assert.equal(refused.text, "slow down, a");
  assert.ok(Number(refused.headers.get("Retry-After")) >= 1, "the hook's answer keeps Retry-After");
  const b = await get(url, { "X-Tenant": "b", "X-Cost": "2" });
  assert.equal(b.status, 200, "another key has its own budget");
  assert.ok(Math.abs(b.json.sluice.remaining - 1) < 0.01, `remaining ${b.json.sluice.remaining}`);

  const missing = await get(url);
  assert.equal(missing.status, 400);
  assert.equal(missing.json.code, "invalid_request");
  assert.equal((await get(url, { "X-Tenant": "d", "X-Cost": "lots" })).status, 400, "a count that is not a number");
  // Above 1e15 Sluice refuses any count (as the Go middleware, 400: the request's doing, not a 500).
  assert.equal((await get(url, { "X-Tenant": "d", "X-Cost": "2e15" })).status, 400, "a count above 1e15");
  // A count over what the limit can ever admit (its capacity) is the request's doing: 413,
  // reported once a minute at most however many come (it was a 500 reported per request).
  const logged = [];
  const strict = await plain(rateLimit({ client: client(), name, key: keyByHeader("X-Tenant"), count: () => 4, log: (m) => logged.push(m) }));
  for (let i = 0; i < 3; i++) {
    const over = await get(strict, { "X-Tenant": "c" });
    assert.equal(over.status, 413, over.text);
    assert.equal(over.json.code, "count_exceeds_capacity");
  }
  assert.equal(logged.length, 1, `reported: ${JSON.stringify(logged)}`);
  assert.match(logged[0] ?? "", /can ever admit/);
});

test("the client's address: X-Forwarded-For only from trusted proxies", async () => {
  const name = await bucket("ip", 1);
  // The test's own connections come from 127.0.0.1: as a trusted proxy, it is believed.
  const behindProxy = await plain(rateLimit({ client: client(), name, key: keyByClientIP(["127.0.0.0/8"]) }));
  const a = await get(behindProxy, { "X-Forwarded-For": "203.0.113.9, 198.51.100.7" });
  assert.equal(a.json.sluice.key, "198.51.100.7", "the right-most untrusted hop");
  assert.equal((await get(behindProxy, { "X-Forwarded-For": "2001:db8:1:2::99" })).json.sluice.key, "2001:db8:1:2::/64");
  assert.equal((await get(behindProxy, { "X-Forwarded-For": "198.51.100.7" })).status, 429, "the same client behind the proxy");
  assert.equal((await get(behindProxy, { "X-Forwarded-For": "198.51.100.8" })).status, 200, "another client behind it");

  // Without trusted proxies the header is ignored: sending another one each time dodges nothing.
  const direct = await plain(rateLimit({ client: client(), name }));
  assert.equal((await get(direct, { "X-Forwarded-For": "192.0.2.1" })).json.sluice.key, "127.0.0.1");
  const dodge = await get(direct, { "X-Forwarded-For": "192.0.2.2" });
  assert.equal(dodge.status, 429, dodge.text);

  assert.throws(() => keyByClientIP(["10.0.0.0/33"]), /neither an address nor a CIDR prefix/);
  const key = keyByClientIP(["10.0.0.0/8", "fd00::/8"]);
  const from = (remoteAddress, xff) => key({ socket: { remoteAddress }, headers: xff ? { "x-forwarded-for": xff } : {} });
  assert.equal(from("::ffff:192.0.2.1"), "192.0.2.1", "an IPv4-mapped peer is its IPv4 address");
  assert.equal(from("2001:db8:0:0:1::5"), "2001:db8::/64");
  assert.equal(from("10.1.2.3", "bogus, 192.0.2.7"), "192.0.2.7");
  assert.equal(from("10.1.2.3", "192.0.2.7, bogus"), "10.1.2.3", "a broken hop: the last address a trusted hop vouched for");
  // An IPv4 address has no zone (Go's netip refuses one): a broken hop too, as in the Go middleware.
  assert.equal(from("10.1.2.3", "5.6.7.8%eth0"), "10.1.2.3", "an IPv4 entry with a zone");
  assert.equal(from("10.1.2.3", "::ffff:5.6.7.8%eth0"), "5.6.7.8", "an IPv6 entry's zone is dropped");
  assert.equal(from("fd00::1", "10.9.9.9"), "10.9.9.9", "every hop trusted: the left-most");
  assert.throws(() => from(undefined), /not an IP address/);
});

test("keyByClientIP trusts IPv4 peers only through IPv4 entries, as the Go middleware does", () => {
  // An IPv4-mapped prefix shorter than /96 ("::ffff:10.0.0.0/8" is ::/8) is a configuration error.
  for (const s of ["::ffff:10.0.0.0/8", "::ffff:0:0/95", "::ffff:10.0.0.0/0"]) {
    assert.throws(() => keyByClientIP([s]), /IPv4-mapped prefix shorter than \/96/, s);
  }
  // An IPv6 prefix covering ::ffff:0:0/96 trusts IPv6 peers only: a forged X-Forwarded-For from
  // an IPv4 peer does not choose its key.
  const from = (key, remoteAddress, xff) => key({ socket: { remoteAddress }, headers: { "x-forwarded-for": xff } });
  for (const s of ["::/0", "::/8", "::/80", "::fffe:0:0/95"]) {
    const key = keyByClientIP([s]);
    assert.equal(from(key, "198.51.100.9", "203.0.113.66"), "198.51.100.9", s);
    assert.equal(from(key, "::ffff:198.51.100.9", "203.0.113.66"), "198.51.100.9", s);
  }
  assert.equal(from(keyByClientIP(["::/0"]), "2001:db8::1", "203.0.113.66"), "203.0.113.66", "::/0 trusts IPv6 peers");
  assert.equal(from(keyByClientIP(["::ffff:0:0/96"]), "198.51.100.9", "203.0.113.66"), "203.0.113.66", "::ffff:0:0/96 trusts IPv4 peers");
  assert.equal(from(keyByClientIP(["::ffff:10.0.0.0/104"]), "10.1.2.3", "203.0.113.66"), "203.0.113.66", "a mapped /104 is 10.0.0.0/8");
});

test("Express: keyByUser, skip, the 429 path, and errors of the next handlers", async () => {
  const name = await bucket("express", 1);
  const app = express();
  app.use((req, _res, next) => {
    const user = req.get("X-User");
    if (user) req.user = { id: user };
    next();
  });
  app.use(rateLimit({ client: client(), name, key: keyByUser(), skip: (req) => req.path === "/healthz" }));
  app.get("/healthz", (_req, res) => res.send("ok"));
  app.get("/hello", (req, res) => res.json({ key: req.sluice.key }));
  app.get("/boom", () => {
    throw new Error("boom");
  });
  app.use((err, _req, res, _next) => res.status(418).json({ error: err.message }));
  const url = await serve(app);

  const alice = await get(`${url}/hello`, { "X-User": "alice" });
  assert.equal(alice.status, 200, alice.text);
  assert.equal(alice.json.key, "user:alice");
  assert.equal(alice.headers.get("RateLimit-Policy"), `"${name}";q=1;w=60`);
  const again = await get(`${url}/hello`, { "X-User": "alice" });
  assert.equal(again.status, 429);
  assert.equal(again.json.code, "rate_limited");
  assert.ok(Number(again.headers.get("Retry-After")) >= 1);
  assert.equal((await get(`${url}/boom`, { "X-User": "bob" })).status, 418, "the next handlers' errors reach Express");
  assert.equal((await get(`${url}/hello`)).status, 400, "no user: cannot be limited");
  for (let i = 0; i < 3; i++) assert.equal((await get(`${url}/healthz`)).status, 200, "skipped");
});

test("when Sluice cannot answer: 503 failing closed, through failing open, or the onError hook", async () => {
  const baseUrl = `http://${await freeAddr()}`;
  const closed = new Sluice({ baseUrl, secretKey: sluice.secretKey, retries: 0, failPolicy: "closed" });
  const logged = [];
  const r = await get(await plain(rateLimit({ client: closed, name: "x", log: (m, e) => logged.push([m, e]) })));
  assert.equal(r.status, 503, r.text);
  assert.equal(r.headers.get("Retry-After"), "1");
  assert.equal(r.json.code, "unavailable");
  assert.equal(r.headers.get("RateLimit"), null);
  assert.match(logged[0]?.[0] ?? "", /fail closed/);

  const open = new Sluice({ baseUrl, secretKey: sluice.secretKey, retries: 0, failPolicy: "open" });
  const o = await get(await plain(rateLimit({ client: open, name: "x" })));
  assert.equal(o.status, 200, o.text);
  assert.equal(o.json.sluice.degraded, true);
  assert.equal(o.headers.get("RateLimit"), null, "no headers Sluice did not send");

  let seen;
  const hooked = rateLimit({
    client: closed,
    name: "x",
    key: () => {
      throw new Error("no key today");
    },
    onError: (err, _req, res) => {
      seen = err;
      res.statusCode = 401;
      res.end();
    },
  });
  assert.equal((await get(await plain(hooked))).status, 401);
  assert.ok(seen instanceof KeyError && seen.cause.message === "no key today", `onError saw ${seen}`);
  assert.throws(() => rateLimit({ client: closed, name: "" }), /options.name/);
});

test("the tenant's plan refusing is a 429 tenant_quota_exceeded with Retry-After, not a 500", async () => {
  const planned = await startSluice({ PLAN_DECISIONS_PER_SECOND: "1" });
  try {
    const c = new Sluice({ baseUrl: planned.baseUrl, secretKey: planned.secretKey, failPolicy: "open" });
    const name = "ts.mw.plan";
    await c.putLimit(name, { kind: "token bucket", rate: 100, period: 60_000 });
    const logged = [];
    const url = await plain(rateLimit({ client: c, name, log: (m, e) => logged.push([m, e]) }));
    // The plan admits one decision a second (a burst of one): of requests in a quick row, it
    // refuses all but about one a second.
    let refused;
    for (let i = 0; i < 20 && !refused; i++) {
      const r = await get(url);
      if (r.status === 429) refused = r;
      else assert.equal(r.status, 200, r.text);
    }
    assert.ok(refused, "the plan refused none of 20 requests");
    const seconds = Number(refused.headers.get("Retry-After"));
    assert.ok(Number.isInteger(seconds) && seconds >= 1 && seconds <= 2, `Retry-After ${refused.headers.get("Retry-After")}`);
    assert.equal(refused.json.status, 429);
    assert.equal(refused.json.code, "tenant_quota_exceeded");
    assert.ok(refused.json.retryAfter >= 1, `retryAfter ${refused.json.retryAfter}`);
    assert.ok(logged.length > 0 && logged.every(([m]) => /plan refused/.test(m)), `logged ${logged.map(([m]) => m)}`);
  } finally {
    await planned.stop();
  }
});

test("a key Sluice refuses is the visitor's 400, and an empty key is the global key", async () => {
  const name = await bucket("badkey", 100);
  const logged = [];
  const url = await plain(rateLimit({ client: client(), name, key: keyByHeader("X-User"), log: (m, e) => logged.push([m, e]) }));
  for (const key of ["k".repeat(257), "ip:203.0.113.1", "session:abc"]) {
    const r = await get(url, { "X-User": key });
    assert.equal(r.status, 400, `key ${key}: ${r.text}`);
    assert.equal(r.json.code, "invalid_request");
  }
  assert.deepEqual(logged, [], "nothing reported");
  assert.equal((await get(url, { "X-User": "k".repeat(256) })).status, 200);

  const lone = await get(await plain(rateLimit({ client: client(), name, key: () => "u\ud800" })));
  assert.equal(lone.status, 400, `a lone surrogate: ${lone.text}`);
  const empty = await get(await plain(rateLimit({ client: client(), name, key: () => "" })));
  assert.equal(empty.status, 200, empty.text);
  assert.equal(empty.json.sluice.key, null, "the global key");
});

test("a concurrency limit's lease is released once the response is done", async () => {
  const name = `ts.mw.inflight.${++names}`;
  await client().putLimit(name, { kind: "concurrency", rate: 1, leaseTtl: 60_000 });
  const url = await plain(rateLimit({ client: client(), name }));
  // The release follows the response's "close" event, so the free slot is awaited (up to 30 s)
  // before each next request; without the release it stays taken for the lease's minute.
  const slotFree = async (what) => {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const v = await client().value(name, "127.0.0.1");
      if (v.value === 1) return;
      if (Date.now() > deadline) assert.fail(`waited 30 s for the slot of ${what} to be released (value ${v.value})`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  for (let i = 1; i <= 3; i++) {
    const r = await get(url);
    assert.equal(r.status, 200, `request ${i}: ${r.text}`);
    assert.ok(r.json.sluice.leaseId, `request ${i} took a lease: ${JSON.stringify(r.json.sluice)}`);
    await slotFree(`request ${i}`);
  }
});

// serveOneVisitor serves mw (its next handler answers "handled") on a server of its own and
// connects one visitor that sends request (raw HTTP): how many times the handler ran, when the
// response closed, when the middleware returned, and the visitor's socket, to hang up.
async function serveOneVisitor(mw, request) {
  const seen = { handled: 0 };
  let responseClosed;
  const closedEvent = new Promise((resolve) => (responseClosed = resolve));
  let middlewareDone;
  const done = new Promise((resolve) => (middlewareDone = resolve));
  const url = await serve((req, res) => {
    res.once("close", responseClosed);
    mw(req, res, () => {
      seen.handled++;
      res.end("handled");
    }).then(middlewareDone, middlewareDone);
  });
  const visitor = connect(Number(new URL(url).port), "127.0.0.1");
  visitor.on("error", () => {}); // its own hang-up
  visitor.write(request);
  return { seen, closedEvent, done, visitor };
}

test("a visitor who hangs up while the key function runs is neither decided for nor handled", async () => {
  const name = `ts.mw.hangupkey.${++names}`;
  await client().putLimit(name, { kind: "concurrency", rate: 1, leaseTtl: 3_600_000 });
  let decisions = 0;
  const f = async (input, init) => {
    if (String(input).endsWith("/limit")) decisions++;
    return fetch(input, init);
  };
  // The key function waits for the test: the visitor hangs up meanwhile (as it could during an
  // authentication step or a slow key lookup).
  let keyAsked;
  const keyInFlight = new Promise((resolve) => (keyAsked = resolve));
  let giveKey;
  const keyGiven = new Promise((resolve) => (giveKey = resolve));
  const mw = rateLimit({ client: client({ fetch: f }), name, key: async () => {
    keyAsked();
    await keyGiven;
    return "alice";
  } });
  const { seen, closedEvent, done, visitor } = await serveOneVisitor(mw, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  await keyInFlight;
  visitor.destroy(); // the visitor hangs up while its key is worked out
  await closedEvent;
  giveKey();
  await done;

  assert.equal(seen.handled, 0, "the next handler ran for a visitor who had hung up");
  assert.equal(decisions, 0, `a decision was made for a visitor who had hung up before it (${decisions})`);
  const v = await client().value(name, "alice");
  assert.equal(v.value, 1, `alice's slot is taken by a visitor who left (value ${v.value})`);
});

test("keyByHeader keys a header sent twice by its first value, as the Go middleware does", async () => {
  let got;
  const url = await serve((req, res) => {
    try {
      got = keyByHeader("X-Api-Key")(req);
    } catch (err) {
      got = err;
    }
    res.end();
  });
  const { port } = new URL(url);
  const visitor = connect(Number(port), "127.0.0.1");
  const answered = new Promise((resolve) => visitor.on("data", resolve));
  visitor.on("error", () => {});
  visitor.write("GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: alice\r\nX-Api-Key: bob\r\nConnection: close\r\n\r\n");
  await answered;
  visitor.destroy();
  assert.equal(got, "alice", `the key of a header sent twice: ${got}`);
});

test("a visitor who hangs up while Sluice decides frees its concurrency slot at once and is not handled", async () => {
  const name = `ts.mw.hangup.${++names}`;
  await client().putLimit(name, { kind: "concurrency", rate: 1, leaseTtl: 3_600_000 });
  // Explicit hand-offs through the client's fetch: the decision is held until the visitor has
  // gone (its response closed), and the release's request is recorded.
  let decisionSent;
  const decisionInFlight = new Promise((resolve) => (decisionSent = resolve));
  let letDecide;
  const decide = new Promise((resolve) => (letDecide = resolve));
  const releases = [];
  const f = async (input, init) => {
    const url = String(input);
    if (url.endsWith("/limit")) {
      decisionSent();
      await decide;
    }
    const answer = fetch(input, init);
    if (url.endsWith("/release")) releases.push({ url, headers: init?.headers ?? {}, answer });
    return answer;
  };
  const mw = rateLimit({ client: client({ fetch: f }), name, key: keyByHeader("X-User") });
  const { seen, closedEvent, done, visitor } = await serveOneVisitor(mw, "GET / HTTP/1.1\r\nHost: x\r\nX-User: alice\r\n\r\n");
  await decisionInFlight;
  visitor.destroy(); // the visitor hangs up while Sluice decides
  await closedEvent; // the server saw it: the response closed before the decision's answer
  letDecide();
  await done;

  assert.equal(releases.length, 1, `the lease the decision took was not released when the middleware returned (releases sent: ${releases.length})`);
  assert.equal(seen.handled, 0, "the next handler ran for a visitor who had hung up");
  assert.equal(releases[0].headers["Idempotency-Key"], undefined, "the release carries no Idempotency-Key");
  const released = await releases[0].answer;
  assert.equal(released.status, 204, `the release was answered ${released.status}`);
  const v = await client().value(name, "alice");
  assert.equal(v.value, 1, `alice's slot is still taken after the release (value ${v.value})`);
  const next = await client().limit(name, { key: "alice" });
  assert.ok(next.ok, `alice's next request is refused: ${JSON.stringify(next)}`);
  await client().releaseLease(next.leaseId);
});

test("a 200 answer from Sluice that does not decode ({} or an empty body) is a 503, not a refusal nor a 500", async () => {
  const name = await bucket("undecodable", 100);
  for (const body of ["{}", ""]) {
    const garbled = async (input, init) => {
      const r = await fetch(input, init);
      if (r.status !== 200 || !String(input).endsWith("/limit")) return r;
      await r.arrayBuffer();
      return new Response(body, { status: 200, headers: { "Content-Type": "application/json" } });
    };
    const logged = [];
    const url = await plain(rateLimit({ client: client({ fetch: garbled }), name, log: (m) => logged.push(m) }));
    const r = await get(url);
    assert.equal(r.status, 503, `answered 200 ${JSON.stringify(body)}: ${r.status} ${r.text}`);
    assert.equal(r.headers.get("Retry-After"), "1");
    assert.doesNotMatch(logged.join("\n"), /refused as invalid/);
  }
});

test("a gateway's 429 in front of Sluice is Sluice unavailable: the fail policy, or 503 with its Retry-After, not a 500", async () => {
  const gateway = async (input, init) => {
    if (!String(input).endsWith("/limit")) return fetch(input, init);
    return new Response("<h1>429 Too Many Requests</h1>", { status: 429, headers: { "Content-Type": "text/html", "Retry-After": "7" } });
  };
  const r = await client({ fetch: gateway, failPolicy: "open" }).limit("api", { key: "k" });
  assert.equal(r.ok, true, "fail open: admitted");
  assert.equal(r.degraded, true);
  const logged = [];
  const closed = await plain(rateLimit({ client: client({ fetch: gateway }), name: "api", log: (m) => logged.push(m) }));
  const refused = await get(closed);
  assert.equal(refused.status, 503, refused.text);
  assert.equal(refused.json.code, "unavailable");
  assert.equal(refused.headers.get("Retry-After"), "7", "the gateway's Retry-After");
  assert.doesNotMatch(logged.join("\n"), /refused as invalid/);
  const open = await plain(rateLimit({ client: client({ fetch: gateway, failPolicy: "open" }), name: "api" }));
  assert.equal((await get(open)).status, 200, "fail open: passed");
});
