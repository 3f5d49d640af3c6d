// The client's tests, against a real Sluice (see server.js). They run on the compiled output.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { after, before, test } from "node:test";

import { NoAnswerError, Sluice, SluiceError } from "../src/index.js";
import { freeAddr, startSluice } from "./server.js";

let sluice; // { baseUrl, secretKey, stop }

before(async () => {
  sluice = await startSluice();
});

after(async () => {
  await sluice?.stop();
});

function client(opts = {}) {
  return new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey, ...opts });
}

let names = 0;
/** A limit name of its own for each use. */
function limitName(what) {
  return `ts.${what}.${++names}`;
}

/** Stores a token bucket of capacity tokens per minute. */
async function putBucket(c, name, capacity) {
  await c.putLimit(name, { kind: "token bucket", rate: capacity, period: 60_000 });
}

/** Whether a token count is want, give or take the refill of a test's duration. */
function near(got, want) {
  return Math.abs(got - want) < 0.01;
}

/** Asserts that promise rejects with a SluiceError and returns it. */
async function problemOf(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof SluiceError, `${err} is not a SluiceError`);
    return err;
  }
  assert.fail("the call succeeded");
}

/** Asserts that promise rejects with an error that is not a SluiceError (Sluice did not answer). */
async function noAnswerOf(promise) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof NoAnswerError, `${err} is not a NoAnswerError`);
    return err;
  }
  assert.fail("the call succeeded");
}

/** A fetch that counts the requests leaving the client and forwards them unchanged. */
function countingFetch() {
  const f = (input, init) => {
    f.calls++;
    return fetch(input, init);
  };
  f.calls = 0;
  return f;
}

/** A client of an address nothing listens on, with fast retries, counting its attempts. */
async function unreachable(opts = {}) {
  const f = countingFetch();
  const c = new Sluice({
    baseUrl: `http://${await freeAddr()}`,
    secretKey: sluice.secretKey,
    retries: 3,
    backoffMs: 1,
    maxBackoffMs: 4,
    fetch: f,
    ...opts,
  });
  return { c, f };
}

test("definitions are put, read, listed and deleted", async () => {
  const c = client();
  const name = limitName("defs");
  const put = await c.putLimit(name, { kind: "fixed window", rate: 5, period: 1000, capacity: 7, shards: 2 });
  assert.equal(put.name, name);
  assert.equal(put.kind, "fixed window");
  assert.equal(put.capacity, 7);
  assert.equal(put.shards, 2);
  assert.ok(Date.parse(put.createdAt) > 0, `createdAt ${put.createdAt}`);
  const got = await c.getLimit(name);
  assert.deepEqual(got, put);
  const list = await c.listLimits();
  assert.ok(list.some((d) => d.name === name && d.shards === 2), `list lacks ${name}`);
  await c.deleteLimit(name);

  const e = await problemOf(c.getLimit(name));
  assert.equal(e.status, 404);
  assert.equal(e.code, "limit_not_found");
  assert.equal(e.detail, "no such limit");
  assert.ok(e.requestId, "a requestId");
  assert.equal(e.message, `sluice: GET /v1/limits/${name}: 404 limit_not_found: no such limit`);
  assert.equal((await problemOf(c.deleteLimit(name))).status, 404);
});

test("overrides are put, listed a page at a time, applied to decisions and deleted", async () => {
  const c = client();
  const name = limitName("overrides");
  await putBucket(c, name, 1);
  const vip = await c.putOverride(name, { match: "vip", rate: 100 });
  assert.equal(vip.match, "vip");
  assert.equal(vip.expiresAt, null);
  await c.putOverride(name, { match: "org:bad:*", action: "deny" });
  for (let i = 0; i < 3; i++) {
    const r = await c.limit(name, { key: "vip" });
    assert.ok(r.ok && r.override === "vip", `vip decision ${i}: ${JSON.stringify(r)}`);
  }
  const denied = await c.limit(name, { key: "org:bad:7" });
  assert.ok(!denied.ok && denied.override === "org:bad:*", JSON.stringify(denied));
  const first = await c.listOverrides(name, { limit: 1 });
  assert.deepEqual(first.overrides.map((o) => o.match), ["org:bad:*"]);
  assert.equal(first.next, "org:bad:*");
  const second = await c.listOverrides(name, { limit: 1, after: first.next });
  assert.deepEqual(second.overrides.map((o) => o.match), ["vip"]);
  // The same pages on a Node without URLSearchParams.prototype.size (18.0 to 18.15, which
  // package.json's engines admit): the query must not be dropped.
  const size = Object.getOwnPropertyDescriptor(URLSearchParams.prototype, "size");
  delete URLSearchParams.prototype.size;
  try {
    const page = await c.listOverrides(name, { limit: 1, after: first.next });
    assert.deepEqual(page.overrides.map((o) => o.match), ["vip"], "the second page without URLSearchParams.size");
  } finally {
    Object.defineProperty(URLSearchParams.prototype, "size", size);
  }
  await c.deleteOverride(name, "vip");
  assert.deepEqual((await c.listOverrides(name)).overrides.map((o) => o.match), ["org:bad:*"]);
  assert.equal((await problemOf(c.deleteOverride(name, "vip"))).code, "not_found");
  assert.equal((await problemOf(c.putOverride(limitName("none"), { match: "k", rate: 1 }))).code, "limit_not_found");
});

test("limit consumes, then refuses with retryAfter in ms and the RateLimit headers", async () => {
  const c = client();
  const name = limitName("limit");
  await putBucket(c, name, 2);
  for (const want of [1, 0]) {
    const r = await c.limit(name, { key: "alice" });
    assert.equal(r.ok, true);
    assert.ok(near(r.remaining, want), `remaining ${r.remaining}, want ${want}`);
    assert.equal(r.name, name);
    assert.equal(r.key, "alice");
    assert.equal(r.retryAfter, null);
    assert.equal(r.degraded, undefined);
    assert.equal(r.rateLimitPolicy, `"${name}";q=2;w=60`);
    assert.ok(r.rateLimit?.startsWith(`"${name}";r=`), `RateLimit ${r.rateLimit}`);
  }
  const refused = await c.limit(name, { key: "alice" });
  assert.equal(refused.ok, false);
  // A token every 30 s: the wait is up to 30,000 ms.
  assert.ok(refused.retryAfter > 0 && refused.retryAfter <= 30_000, `retryAfter ${refused.retryAfter}`);

  // Another key and the global key have their own state.
  const bob = await c.limit(name, { key: "bob", count: 2 });
  assert.ok(bob.ok && near(bob.remaining, 0));
  const global = await c.limit(name);
  assert.equal(global.ok, true);
  assert.equal(global.key, null);
});

test("check and value consume nothing", async () => {
  const c = client();
  const name = limitName("check");
  await putBucket(c, name, 3);
  await c.limit(name, { key: "k" });
  for (let i = 0; i < 3; i++) {
    const r = await c.check(name, { key: "k", count: 2 });
    assert.ok(r.ok && near(r.remaining, 0) && r.rateLimitPolicy, JSON.stringify(r)); // what would remain
  }
  const over = await c.check(name, { key: "k", count: 3 });
  assert.equal(over.ok, false);
  assert.ok(over.retryAfter > 0);
  const v = await c.value(name, "k");
  assert.ok(v.value >= 2 && v.value < 3, `value ${v.value}: want 2 (and under 3) left of 3`);
  assert.equal(v.shards.length, 1);
  assert.equal(v.config.kind, "token bucket");
  assert.equal(v.config.rate, 3);
  assert.ok(v.ts > 0);
  assert.equal((await c.value(name)).value, 3, "the global key is full");
});

test("an inline config decides without a stored definition", async () => {
  const c = client();
  const name = limitName("inline");
  const config = { kind: "sliding window", rate: 1, period: 60_000, resolution: 4 };
  assert.equal((await c.limit(name, { key: "x", config })).ok, true);
  assert.equal((await c.limit(name, { key: "x", config })).ok, false);
});

test("batch is all or nothing and checkBatch consumes nothing", async () => {
  const c = client();
  const roomy = limitName("roomy");
  const tight = limitName("tight");
  await putBucket(c, roomy, 10);
  await putBucket(c, tight, 1);
  const items = [
    { name: roomy, key: "u" },
    { name: tight, key: "u" },
  ];
  const checked = await c.checkBatch(items);
  assert.ok(checked.ok && checked.results.length === 2 && checked.rateLimitPolicy, JSON.stringify(checked));

  const first = await c.batch(items);
  assert.equal(first.ok, true);
  assert.equal(first.retryAfter, null);
  assert.ok(near(first.results[0].remaining, 9) && near(first.results[1].remaining, 0), JSON.stringify(first));
  assert.equal(first.results[1].name, tight);
  assert.ok(first.rateLimit.includes(roomy) && first.rateLimit.includes(tight), `RateLimit ${first.rateLimit}`);

  const second = await c.batch(items);
  assert.equal(second.ok, false);
  assert.ok(second.retryAfter > 0);
  assert.equal(second.results[1].ok, false);
  const v = await c.value(roomy, "u");
  assert.ok(v.value >= 9 && v.value < 10, `roomy ${v.value}: want 9 (nothing taken by the refusal)`);
});

test("bulk decides each item and reports an invalid item's own error", async () => {
  const c = client();
  const name = limitName("bulk");
  await putBucket(c, name, 1);
  const res = await c.bulk([
    { name, key: "a" },
    { name, key: "a" },
    { name: limitName("missing"), key: "a" },
    { name, key: "b", ip: "192.0.2.1" },
    { name, key: "c", count: -1 },
    { name: "no spaces", key: "a" },
    { name: limitName("inline"), key: "d", config: { kind: "token bucket", rate: Infinity, period: 1000 } },
  ]);
  assert.equal(res.length, 7);
  assert.equal(res[0].error, undefined);
  assert.equal(res[0].ok, true);
  assert.equal(res[1].ok, false);
  assert.ok(res[1].retryAfter > 0);
  assert.ok(res[2].error instanceof SluiceError);
  assert.equal(res[2].error.status, 404);
  assert.equal(res[2].error.code, "limit_not_found");
  // The request's ID, under which Sluice logs the item's failure (an item's problem has none).
  assert.ok(res[2].error.requestId, `requestId ${res[2].error.requestId}`);
  assert.ok(res[3].error instanceof SluiceError);
  assert.equal(res[3].error.status, 400);
  assert.equal(res[3].error.code, "invalid_request");
  assert.ok(res[3].error.field.endsWith("ip"), `field ${res[3].error.field}`);
  assert.ok(res[3].error.message.startsWith("sluice: decision 3 ("), res[3].error.message);
  // Refused by the client, not sent: the others were decided all the same.
  assert.ok(res[4].error instanceof TypeError && /decision 4 .*count/.test(res[4].error.message), `${res[4].error}`);
  assert.ok(res[5].error instanceof TypeError && /decision 5: the name "no spaces"/.test(res[5].error.message), `${res[5].error}`);
  // A number JSON cannot carry (JSON.stringify would send null, which Sluice refuses with the
  // whole request) is its item's own error too.
  assert.ok(res[6].error instanceof TypeError && /decision 6 .*rate is Infinity/.test(res[6].error.message), `${res[6].error}`);
});

test("a bulk item's error names the caller's index, though the items refused before sending were left out", async () => {
  const c = client();
  const name = limitName("bulkfield");
  await putBucket(c, name, 5);
  // Items 0 and 2 are refused by the client and not sent: Sluice sees item 3 as its decisions[1].
  const res = await c.bulk([{ name: "no spaces" }, { name, key: "a" }, { name, count: -1 }, { name, key: "b", ip: "192.0.2.1" }]);
  assert.ok(res[0].error instanceof TypeError && res[2].error instanceof TypeError, JSON.stringify(res));
  assert.ok(res[1].ok, JSON.stringify(res[1]));
  assert.ok(res[3].error instanceof SluiceError, `item 3: ${JSON.stringify(res[3])}`);
  assert.equal(res[3].error.field, "decisions[3].ip", "item 3's field");
  assert.match(res[3].error.message, /^sluice: decision 3 \(.*\(field decisions\[3\]\.ip\)$/);

  // Every field of errors[] too (a fake answer: the real Sluice names one field per item), and
  // only its own prefix.
  const answer = {
    results: [
      {
        error: {
          type: "about:blank", title: "Bad Request", status: 400, code: "invalid_request", detail: "no",
          field: "decisions[0].key",
          errors: [
            { field: "decisions[0].key", detail: "too long" },
            { field: "decisions[0].attributes.org", detail: "not text" },
            { field: "decisions[10].key", detail: "another item's" },
            { field: "limits", detail: "not an item's" },
          ],
        },
      },
    ],
  };
  const fake = async () => new Response(JSON.stringify(answer), { status: 200, headers: { "Content-Type": "application/json" } });
  const [, faked] = await new Sluice({ baseUrl: "http://sluice.invalid", secretKey: "sk", fetch: fake }).bulk([{ name: "" }, { name: "x", key: "k" }]);
  assert.ok(faked.error instanceof SluiceError, JSON.stringify(faked));
  assert.equal(faked.error.field, "decisions[1].key");
  assert.deepEqual(
    faked.error.errors.map((e) => e.field),
    ["decisions[1].key", "decisions[1].attributes.org", "decisions[10].key", "limits"],
    "the fields of errors[]",
  );
});

test("reset forgets the global key, one key, or all keys", async () => {
  const c = client();
  const name = limitName("reset");
  await putBucket(c, name, 1);
  const take = async (key) => assert.equal((await c.limit(name, key ? { key } : {})).ok, true, `take ${key}`);
  const isFull = async (key, want) => {
    const v = await c.value(name, key);
    assert.equal(v.value >= 1, want, `key ${key} value ${v.value}, want full=${want}`);
  };
  await take();
  await take("a");
  await take("b");
  await c.reset(name);
  await isFull(undefined, true);
  await isFull("a", false);
  await c.reset(name, "a");
  await isFull("a", true);
  await isFull("b", false);
  await c.reset(name, "never-seen"); // a key without state: still a success
  await take("a");
  await c.resetAll(name);
  await isFull("a", true);
  await isFull("b", true);
});

test("problems become SluiceErrors with their fields", async () => {
  const c = client();
  const name = limitName("problems");
  await putBucket(c, name, 1);

  const bad = await problemOf(c.limit(name, { key: "k", ip: "192.0.2.1" }));
  assert.equal(bad.status, 400);
  assert.equal(bad.code, "invalid_request");
  assert.equal(bad.field, "ip");
  assert.ok(bad.detail);
  assert.ok(bad.requestId);
  assert.equal(bad.retryAfter, null);
  assert.equal(bad.name, "SluiceError");
  assert.ok(bad.message.includes("400 invalid_request"), bad.message);

  const kind = await problemOf(c.putLimit(name, { kind: "leaky bucket", rate: 1, period: 1 }));
  assert.equal(kind.status, 400);
  assert.equal(kind.code, "invalid_config");

  const missing = await problemOf(c.check(limitName("missing")));
  assert.equal(missing.status, 404);
  assert.equal(missing.code, "limit_not_found");

  // A refusal asked to throw: a 429 problem with the wait and the limit's name.
  assert.equal((await c.limit(name, { key: "k" })).ok, true);
  const refused = await problemOf(c.limit(name, { key: "k", throws: true }));
  assert.equal(refused.status, 429);
  assert.equal(refused.code, "rate_limited");
  assert.ok(refused.retryAfter > 0 && refused.retryAfter <= 60_000, `retryAfter ${refused.retryAfter}`);
  assert.equal(refused.limitName, name);
  const batchRefused = await problemOf(c.batch([{ name, key: "k" }], { throws: true }));
  assert.equal(batchRefused.status, 429);
  assert.ok(batchRefused.retryAfter > 0);

  const wrongKey = await problemOf(new Sluice({ baseUrl: sluice.baseUrl, secretKey: "sk_wrong" }).listLimits());
  assert.equal(wrongKey.status, 401);
  assert.equal(wrongKey.code, "unauthorized");
});

test("names and counts Sluice cannot take are refused before sending, whatever the fail policy", async () => {
  const { c, f } = await unreachable({ failPolicy: "open" });
  const cases = [
    ["limit", () => c.limit("a b"), /limit: the name "a b" is not 1 to 128 characters/],
    ["check", () => c.check("x".repeat(129)), /the name "x{129}"/],
    ["count", () => c.limit("x", { count: -1 }), /limit \(x\): count must be a finite number of tokens, 0 or more, not -1/],
    ["NaN", () => c.check("x", { count: NaN }), /count must be/],
    ["string", () => c.limit("x", { count: "2" }), /count must be/],
    ["batch", () => c.batch([{ name: "x" }, { name: "" }]), /limit item 1: the name ""/],
    ["checkBatch", () => c.checkBatch([{ name: "x", count: Infinity }]), /check item 0 \(x\): count/],
    ["value", () => c.value("x/y"), /the name "x\/y"/],
    ["putLimit", () => c.putLimit("", { kind: "token bucket", rate: 1, period: 1 }), /the name ""/],
  ];
  for (const [what, call, message] of cases) await assert.rejects(call(), (err) => err instanceof TypeError && message.test(err.message), what);
  const all = await c.bulk([{ name: "bad name" }]);
  assert.ok(all.length === 1 && all[0].error instanceof TypeError, JSON.stringify(all));
  assert.equal(f.calls, 0, "nothing was sent");
});

test("consuming calls are never retried and idempotent ones are", async () => {
  const items = [{ name: "x", key: "k" }];
  const cases = [
    ["limit", (c) => c.limit("x"), 1],
    ["batch", (c) => c.batch(items), 1],
    ["bulk", (c) => c.bulk(items), 1],
    ["check", (c) => c.check("x"), 4],
    ["checkBatch", (c) => c.checkBatch(items), 4],
    ["value", (c) => c.value("x", "k"), 4],
    ["reset", (c) => c.reset("x", "k"), 4],
    ["resetAll", (c) => c.resetAll("x"), 4],
    ["putLimit", (c) => c.putLimit("x", { kind: "token bucket", rate: 1, period: 1 }), 4],
    ["getLimit", (c) => c.getLimit("x"), 4],
    ["listLimits", (c) => c.listLimits(), 4],
    ["deleteLimit", (c) => c.deleteLimit("x"), 4],
  ];
  for (const [call, run, want] of cases) {
    const { c, f } = await unreachable();
    const err = await noAnswerOf(run(c)); // fail closed is the default
    assert.equal(err.timedOut, false, call);
    assert.equal(f.calls, want, `${call}: ${f.calls} attempts, want ${want}`);
  }
});

/** A fetch that answers the first n requests with the 503 problem Sluice fails closed with and forwards the rest. */
function failingFetch(n) {
  const f = (input, init) => {
    f.calls++;
    if (f.calls <= n) {
      const body = { type: "about:blank", title: "Service Unavailable", status: 503, detail: "try again", code: "unavailable" };
      return Promise.resolve(new Response(JSON.stringify(body), { status: 503, headers: { "Content-Type": "application/problem+json" } }));
    }
    return fetch(input, init);
  };
  f.calls = 0;
  return f;
}

/** A fetch that answers the first request with Sluice's 503 and the given Retry-After, noting when each request came. */
function slowingFetch(retryAfter) {
  const f = (input, init) => {
    f.arrivals.push(performance.now());
    if (f.arrivals.length === 1) {
      const body = { type: "about:blank", title: "Service Unavailable", status: 503, detail: "try again", code: "unavailable" };
      const headers = { "Content-Type": "application/problem+json", "Retry-After": retryAfter };
      return Promise.resolve(new Response(JSON.stringify(body), { status: 503, headers }));
    }
    return fetch(input, init);
  };
  f.arrivals = [];
  f.gap = () => {
    assert.equal(f.arrivals.length, 2, "a 503, then the retry");
    return f.arrivals[1] - f.arrivals[0];
  };
  return f;
}

test("a retry after a 503 waits what its Retry-After asks, up to maxBackoffMs", async () => {
  const name = limitName("ra503");
  await putBucket(client(), name, 5);
  // The backoff alone would retry after at most 2 ms; the 503 asks for a second (or, as an
  // HTTP date, at least two), and maxBackoffMs (5 s) allows it.
  for (const asDate of [false, true]) {
    const retryAfter = asDate ? new Date(Date.now() + 3000).toUTCString() : "1";
    const f = slowingFetch(retryAfter);
    const r = await client({ retries: 1, backoffMs: 1, maxBackoffMs: 5000, fetch: f }).check(name, { key: "k" });
    assert.ok(r.ok, JSON.stringify(r));
    assert.ok(f.gap() >= 900, `Retry-After ${retryAfter}: the retry came ${f.gap()} ms after the 503, want about a second or more`);
  }
  // Beyond maxBackoffMs it waits maxBackoffMs, not an hour: the call ends within its 30 s timeout.
  const f = slowingFetch("3600");
  const r = await client({ retries: 1, backoffMs: 1, maxBackoffMs: 20, timeoutMs: 30000, fetch: f }).check(name, { key: "k" });
  assert.ok(r.ok, JSON.stringify(r));
  f.gap();
  // A Retry-After that would leave the call less time for its retry than it waited is not
  // waited for: the backoff's retry is answered in time, where waiting a second would leave the
  // retry nothing (800 ms) or too little (1.5 s) before the timeout.
  for (const timeoutMs of [800, 1500]) {
    const f = slowingFetch("1");
    const r = await client({ retries: 1, backoffMs: 1, maxBackoffMs: 5000, timeoutMs, fetch: f }).check(name, { key: "k" });
    assert.ok(r.ok, JSON.stringify(r));
    assert.ok(f.gap() < 1000, `timeout ${timeoutMs} ms: the retry came ${f.gap()} ms after the 503, want the backoff's`);
    // The same with the call's own timeoutMs under a client's long one.
    const g = slowingFetch("1");
    const s = await client({ retries: 1, backoffMs: 1, maxBackoffMs: 5000, timeoutMs: 60_000, fetch: g }).check(name, { key: "k" }, { timeoutMs });
    assert.ok(s.ok, JSON.stringify(s));
    assert.ok(g.gap() < 1000, `the call's own timeout ${timeoutMs} ms: the retry came ${g.gap()} ms after the 503, want the backoff's`);
  }
  // When retries run out, the error carries it.
  const e = await problemOf(client({ retries: 0, fetch: slowingFetch("1") }).check(name, { key: "k" }));
  assert.equal(e.status, 503);
  assert.equal(e.retryAfter, 1000);
});

test("a 503 is retried for check but never for limit", async () => {
  const name = limitName("r503");
  await putBucket(client(), name, 5);
  const fast = { retries: 2, backoffMs: 1, maxBackoffMs: 4 };

  let f = failingFetch(2);
  const r = await client({ ...fast, fetch: f }).check(name, { key: "k" });
  assert.ok(r.ok && near(r.remaining, 4), JSON.stringify(r));
  assert.equal(f.calls, 3, "two 503s, then Sluice's answer");

  f = failingFetch(3);
  const e = await problemOf(client({ ...fast, fetch: f }).check(name, { key: "k" }));
  assert.equal(e.status, 503);
  assert.equal(e.code, "unavailable");
  assert.equal(f.calls, 3);

  f = failingFetch(1);
  assert.equal((await problemOf(client({ ...fast, fetch: f }).limit(name, { key: "k" }))).status, 503);
  assert.equal(f.calls, 1, "limit is never retried");

  f = failingFetch(1);
  const open = await client({ ...fast, fetch: f, failPolicy: "open" }).limit(name, { key: "k" });
  assert.ok(open.ok && open.degraded, JSON.stringify(open));
  assert.equal(f.calls, 1);
  const v = await client().value(name, "k");
  assert.ok(v.value > 4.99, `value ${v.value}: nothing was consumed, want 5`);
});

test("an error answer that is not a problem is a SluiceError, and a 5xx one is Sluice not answering", async () => {
  const proxyPage = () => Promise.resolve(new Response("<h1>502 Bad Gateway</h1>", { status: 502, headers: { "Content-Type": "text/html" } }));
  const e = await problemOf(client({ fetch: proxyPage }).check("x"));
  assert.equal(e.status, 502);
  assert.equal(e.code, "");
  assert.match(e.detail, /the answer is not a problem: <h1>502 Bad Gateway/);
  const r = await client({ fetch: proxyPage, failPolicy: "open" }).check("x", { key: "k" });
  assert.ok(r.ok && r.degraded && r.key === "k", JSON.stringify(r));

  // An answer beyond 8 MiB is read no further: it fails to decode.
  const huge = () => Promise.resolve(new Response(`{"limits": [${"1,".repeat(5 << 20)}1]}`, { status: 200 }));
  await assert.rejects(client({ fetch: huge }).listLimits(), (err) => !(err instanceof SluiceError) && /decode the answer/.test(err.message));
});

test("fail open admits, degraded, when Sluice is unreachable", async () => {
  const { c } = await unreachable({ failPolicy: "open" });
  const r = await c.limit("x", { key: "k" });
  assert.deepEqual(r, { ok: true, retryAfter: null, remaining: 0, name: "x", key: "k", degraded: true });
  const b = await c.batch([{ name: "x" }, { name: "y" }]);
  assert.ok(b.ok && b.degraded && b.results.length === 2 && b.results[1].degraded && b.results[1].key === null, JSON.stringify(b));
  const bulk = await c.bulk([{ name: "x" }]);
  assert.ok(bulk.length === 1 && bulk[0].error === undefined && bulk[0].ok && bulk[0].degraded, JSON.stringify(bulk));
  // Not for the calls that are not decisions.
  await noAnswerOf(c.value("x", "k"));
  // Nor when the caller gave up.
  const abort = new AbortController();
  abort.abort(new Error("caller gave up"));
  await assert.rejects(c.limit("x", {}, { signal: abort.signal }), /caller gave up/);
});

test("fail open never hides the caller's mistakes (4xx)", async () => {
  const c = client({ failPolicy: "open" });
  assert.equal((await problemOf(c.limit(limitName("missing")))).code, "limit_not_found");
  assert.equal((await problemOf(c.limit(limitName("bad"), { key: "k", ip: "192.0.2.1" }))).status, 400);
});

test("a fallback function decides, and its error is the call's", async () => {
  let seen;
  const { c } = await unreachable({
    failPolicy: (name, d, err) => {
      seen = err;
      if (d.key === "bad") throw new Error("no fallback for bad");
      return { ok: d.key === "friend", retryAfter: 60_000 };
    },
  });
  const r = await c.check("x", { key: "stranger" });
  assert.deepEqual(r, { ok: false, retryAfter: 60_000, remaining: 0, name: "x", key: "stranger", degraded: true });
  assert.ok(seen instanceof NoAnswerError, `the fallback saw ${seen}`);

  const b = await c.checkBatch([
    { name: "x", key: "friend" },
    { name: "y", key: "stranger" },
  ]);
  assert.ok(!b.ok && b.retryAfter === 60_000 && b.results[0].ok && b.degraded, JSON.stringify(b));
  await assert.rejects(c.limit("x", { key: "bad" }), { message: "no fallback for bad" });
  const bulk = await c.bulk([
    { name: "x", key: "friend" },
    { name: "x", key: "bad" },
  ]);
  assert.ok(bulk[0].ok && bulk[0].degraded, JSON.stringify(bulk[0]));
  assert.equal(bulk[1].error?.message, "no fallback for bad");
});

test("throws: true throws a fallback's refusal as Sluice's own 429, marked degraded", async () => {
  const { c } = await unreachable({
    retries: 0,
    failPolicy: (name, d) => ({ ok: d.key === "friend", retryAfter: d.key === "slow" ? 9_000 : 5_000 }),
  });
  const refusal = async (what, call, name, retryAfter) => {
    let err;
    const r = await call().catch((e) => void (err = e));
    assert.ok(err !== undefined, `${what}: the fallback refused, yet throws: true resolved with ${JSON.stringify(r)}`);
    assert.ok(err instanceof SluiceError, `${what}: threw ${err}, not a SluiceError`);
    assert.equal(err.status, 429, what);
    assert.equal(err.code, "rate_limited", what);
    assert.equal(err.retryAfter, retryAfter, what);
    assert.equal(err.limitName, name, what);
    assert.equal(err.degraded, true, what);
    assert.ok(err.cause instanceof NoAnswerError, `${what}: the cause is ${err.cause}`);
  };
  await refusal("limit", () => c.limit("x", { key: "k", throws: true }), "x", 5_000);
  await refusal("check", () => c.check("x", { key: "k", throws: true }), "x", 5_000);
  const items = [
    { name: "a", key: "friend" },
    { name: "b", key: "k" },
    { name: "c", key: "slow" },
  ];
  // As Sluice does, the batch throws the refusal of the longest wait.
  await refusal("batch", () => c.batch(items, { throws: true }), "c", 9_000);
  await refusal("checkBatch", () => c.checkBatch(items, { throws: true }), "c", 9_000);
  // What the fallback admits is returned, and without throws a refusal is a result.
  const admitted = await c.limit("x", { key: "friend", throws: true });
  assert.ok(admitted.ok && admitted.degraded, JSON.stringify(admitted));
  const batch = await c.batch([items[0]], { throws: true });
  assert.ok(batch.ok && batch.degraded, JSON.stringify(batch));
  const refused = await c.limit("x", { key: "k" });
  assert.ok(!refused.ok && refused.degraded, JSON.stringify(refused));
  // A SluiceError Sluice answered is not degraded.
  assert.equal(new SluiceError(429, { code: "rate_limited" }, "x").degraded, undefined);
});

test("the timeout counts as Sluice not answering", async (t) => {
  // A listener that accepts connections and never answers.
  const sockets = new Set();
  const silent = createServer((s) => sockets.add(s));
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    for (const s of sockets) s.destroy();
    return new Promise((resolve) => silent.close(resolve));
  });
  const baseUrl = `http://127.0.0.1:${silent.address().port}`;

  const start = performance.now();
  const closed = new Sluice({ baseUrl, secretKey: sluice.secretKey, timeoutMs: 100 });
  const err = await noAnswerOf(closed.check("x"));
  assert.equal(err.timedOut, true);
  assert.match(err.message, /no answer in 100 ms/);
  const took = performance.now() - start;
  assert.ok(took >= 90 && took < 10_000, `the call took ${took} ms with a 100 ms timeout`);

  const open = new Sluice({ baseUrl, secretKey: sluice.secretKey, timeoutMs: 100, failPolicy: "open" });
  const r = await open.limit("x");
  assert.ok(r.ok && r.degraded, JSON.stringify(r));

  // A call's own timeoutMs bounds it in place of the client's.
  const slow = new Sluice({ baseUrl, secretKey: sluice.secretKey, timeoutMs: 60_000 });
  const began = performance.now();
  const short = await noAnswerOf(slow.check("x", {}, { timeoutMs: 100 }));
  assert.equal(short.timedOut, true);
  assert.match(short.message, /no answer in 100 ms/);
  const waited = performance.now() - began;
  assert.ok(waited >= 90 && waited < 10_000, `the call took ${waited} ms with its own 100 ms timeout under the client's 60 s`);

  // The caller giving up on a call in flight is its own doing: no fail policy, no timeout.
  const patient = new Sluice({ baseUrl, secretKey: sluice.secretKey, timeoutMs: 60_000, failPolicy: "open" });
  const abort = new AbortController();
  const pending = patient.limit("x", {}, { signal: abort.signal });
  abort.abort(new Error("caller gave up"));
  await assert.rejects(pending, /caller gave up/);
});

test("a shadow gcra limit with a penalty keeps its mode and penalty, admits with its shadow outcome, and value has fullAt", async () => {
  const c = client();
  const name = limitName("shadow");
  const put = await c.putLimit(name, { kind: "gcra", rate: 1, period: 3_600_000, capacity: 2, mode: "shadow", penalty: 60_000 });
  assert.equal(put.kind, "gcra");
  assert.equal(put.mode, "shadow");
  assert.equal(put.penalty, 60_000);
  const first = await c.limit(name, { key: "k", count: 2 });
  assert.deepEqual([first.ok, first.shadow], [true, { ok: true, retryAfter: null }]);
  const r = await c.limit(name, { key: "k", throws: true });
  assert.equal(r.ok, true);
  assert.equal(r.retryAfter, null);
  assert.equal(r.shadow.ok, false);
  assert.ok(r.shadow.retryAfter >= 59 * 60_000, `shadow retryAfter ${r.shadow.retryAfter}`);
  const v = await c.value(name, "k");
  const now = Date.now();
  assert.ok(v.fullAt > now + 7_100_000, `fullAt ${v.fullAt}`);
  assert.ok(v.penaltyUntil > now + 50_000, `penaltyUntil ${v.penaltyUntil}`);
  const full = await c.value(name, "unused");
  assert.equal(full.fullAt, null);
});

test("a decision carries its parents' decisions and the override that decided it", async () => {
  const c = client();
  const org = limitName("org");
  const user = limitName("user");
  await putBucket(c, org, 100);
  await c.putLimit(user, { kind: "token bucket", rate: 10, period: 60_000, parents: [{ name: org, key: "org:{org}" }] });
  const r = await c.limit(user, { key: "alice", attributes: { org: "acme" } });
  assert.equal(r.ok, true);
  assert.equal(r.parents?.length, 1, JSON.stringify(r));
  assert.equal(r.parents[0].name, org);
  assert.equal(r.parents[0].key, "org:acme");
  assert.equal(r.parents[0].ok, true);
  assert.ok(near(r.parents[0].remaining, 99), `parent remaining ${r.parents[0].remaining}`);
  assert.equal(r.override, undefined);
  // An override (the client has no call for them: the API's own route).
  const resp = await fetch(`${sluice.baseUrl}/v1/limits/${user}/overrides`, {
    method: "PUT",
    headers: { Authorization: `Bearer ${sluice.secretKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ match: "vip:*", capacity: 50 }),
  });
  assert.equal(resp.status, 200, await resp.text());
  const v = await c.limit(user, { key: "vip:bob", attributes: { org: "acme" } });
  assert.equal(v.override, "vip:*", JSON.stringify(v));
});

test("an idempotencyKey replays the first answer and makes consuming calls retryable", async () => {
  const c = client();
  const name = limitName("idem");
  await putBucket(c, name, 10);
  const opts = { idempotencyKey: `order-${name}` };
  const first = await c.limit(name, { key: "a", count: 3 }, opts);
  assert.ok(first.ok && !first.replayed, JSON.stringify(first));
  const again = await c.limit(name, { key: "a", count: 3 }, opts);
  assert.ok(again.replayed && again.remaining === first.remaining && again.rateLimit === first.rateLimit, JSON.stringify(again));
  assert.ok(near((await c.value(name, "a")).value, 7), "one consumption of 3");
  const reused = await problemOf(c.limit(name, { key: "a", count: 4 }, opts));
  assert.equal(reused.status, 422);
  assert.equal(reused.code, "idempotency_key_reused");

  const items = [{ name, key: "b", count: 2 }];
  const b1 = await c.batch(items, { idempotencyKey: `batch-${name}` });
  const b2 = await c.batch(items, { idempotencyKey: `batch-${name}` });
  assert.ok(b1.ok && !b1.replayed && b2.replayed, JSON.stringify([b1, b2]));
  assert.ok(near((await c.value(name, "b")).value, 8), "one consumption of 2");
  const bulk = [{ name, key: "c", count: 3 }];
  const [u1] = await c.bulk(bulk, { idempotencyKey: `bulk-${name}` });
  const [u2] = await c.bulk(bulk, { idempotencyKey: `bulk-${name}` });
  assert.ok(u1.ok && !u1.replayed && u2.replayed && u2.remaining === u1.remaining, JSON.stringify([u1, u2]));
  assert.ok(near((await c.value(name, "c")).value, 7), "one consumption of 3");
  // A refund under a key gives back once: its retry replays the first answer.
  const r1 = await c.refund(name, { key: "c", count: 2 }, { idempotencyKey: `refund-${name}` });
  const r2 = await c.refund(name, { key: "c", count: 2 }, { idempotencyKey: `refund-${name}` });
  assert.ok(r1.refunded === 2 && !r1.replayed && r2.replayed && r2.remaining === r1.remaining, JSON.stringify([r1, r2]));
  assert.ok(near((await c.value(name, "c")).value, 9), "one refund of 2");

  for (const [call, run] of [
    ["limit", (u) => u.limit("x", {}, { idempotencyKey: "k-1" })],
    ["batch", (u) => u.batch([{ name: "x" }], { idempotencyKey: "k-1" })],
    ["bulk", (u) => u.bulk([{ name: "x" }], { idempotencyKey: "k-1" })],
    ["refund", (u) => u.refund("x", { count: 1 }, { idempotencyKey: "k-1" })],
  ]) {
    const { c: u, f } = await unreachable();
    await noAnswerOf(run(u));
    assert.equal(f.calls, 4, `${call} with an idempotencyKey: ${f.calls} attempts, want 4 (retried)`);
  }
  const { c: u, f } = await unreachable();
  await assert.rejects(u.limit("x", {}, { idempotencyKey: "clé" }), TypeError);
  assert.equal(f.calls, 0, "a malformed key is not sent");
});

test("a malformed idempotencyKey, a body JSON cannot carry, a bad baseUrl or secretKey are thrown, never failed open", async () => {
  // A fail-open client of the real Sluice, counting what it sends: none of these may come back
  // ok and degraded (Sluice did answer nothing: nothing was asked).
  const f = countingFetch();
  const c = client({ failPolicy: "open", fetch: f });
  const name = limitName("badlocal");
  await c.putLimit(name, { kind: "token bucket", rate: 1, period: 3_600_000 });
  const sentBefore = f.calls;
  for (let i = 0; i < 5; i++) {
    await assert.rejects(c.limit(name, { key: "alice" }, { idempotencyKey: `order-é-${i}` }), TypeError, `limit with a non-ASCII key, ${i}`);
  }
  await assert.rejects(c.bulk([{ name, key: "alice" }], { idempotencyKey: "k".repeat(256) }), TypeError, "bulk with a 256-character key");
  await assert.rejects(c.batch([{ name, key: "alice" }], { idempotencyKey: "" }), TypeError, "batch with an empty key");
  // Before any item is judged: a bulk whose items are all invalid throws for its key too.
  await assert.rejects(c.bulk([{ name: "bad name" }], { idempotencyKey: "a\nb" }), TypeError, "bulk of invalid items with a bad key");
  const big = { attributes: { org: 1n } };
  await assert.rejects(c.limit(name, { key: "alice", ...big }), /BigInt/, "limit with a BigInt");
  await assert.rejects(c.batch([{ name, key: "alice", ...big }]), /BigInt/, "batch with a BigInt");
  const [lone] = await c.bulk([{ name, key: "alice", ...big }]);
  assert.ok(lone.error instanceof TypeError && /BigInt/.test(lone.error.message), `bulk with a BigInt: ${JSON.stringify(lone)}`);
  // A call's own timeoutMs that is no number of milliseconds setTimeout can wait.
  for (const timeoutMs of [NaN, -1, Infinity, 2 ** 31, "100"]) {
    await assert.rejects(c.limit(name, { key: "alice" }, { timeoutMs }), /timeoutMs must be a number of milliseconds/, `limit with timeoutMs ${String(timeoutMs)}`);
  }
  assert.equal(f.calls, sentBefore, "nothing was sent");
  const v = await c.value(name, "alice");
  assert.ok(near(v.value, 1), `value ${v.value}: nothing was consumed, want 1`);
  // The same key, well formed, is sent and consumes.
  const r = await c.limit(name, { key: "alice" }, { idempotencyKey: "order-e-0" });
  assert.ok(r.ok && !r.degraded, JSON.stringify(r));
  // In bulk, an item JSON cannot carry is that item's error alone; the others are decided.
  const [bad, good] = await c.bulk([{ name, key: "bob", ...big }, { name, key: "carol" }]);
  assert.ok(bad.error instanceof TypeError && /BigInt/.test(bad.error.message), `bulk item with a BigInt: ${JSON.stringify(bad)}`);
  assert.ok(good.ok === true && !good.degraded, `the other bulk item: ${JSON.stringify(good)}`);

  // fetch itself refuses credentials in the URL and its "bad ports" without connecting.
  for (const baseUrl of ["localhost:8080", "sluice.example.com", "ftp://sluice.example.com", "http://", "", "http://user:pass@127.0.0.1:8080", "http://127.0.0.1:6000", "https://sluice.example.com:10080"]) {
    assert.throws(() => new Sluice({ baseUrl, secretKey: "sk", failPolicy: "open" }), TypeError, `baseUrl ${JSON.stringify(baseUrl)}`);
  }
  for (const secretKey of [`${sluice.secretKey}\n`, "s\rk", "sk\u0100"]) {
    assert.throws(() => new Sluice({ baseUrl: sluice.baseUrl, secretKey, failPolicy: "open" }), TypeError, `secretKey ${JSON.stringify(secretKey)}`);
  }
  // NaN (Number of an unset variable) would mean no timeout and endless retries; a timeout past
  // setTimeout's limit would fire at once.
  for (const o of [{ timeoutMs: NaN }, { timeoutMs: -1 }, { timeoutMs: Infinity }, { timeoutMs: 2 ** 31 }, { retries: NaN }, { retries: 1.5 }, { retries: -1 },
    { backoffMs: NaN }, { maxBackoffMs: Infinity }, { timeoutMs: "500" }]) {
    assert.throws(() => new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey, failPolicy: "open", ...o }), TypeError, `options ${JSON.stringify(o)} (${String(Object.values(o)[0])})`);
  }
  for (const o of [{ timeoutMs: 0 }, { timeoutMs: 2 ** 31 - 1 }, { retries: 0 }, { backoffMs: 0, maxBackoffMs: 0 }]) {
    new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey, ...o });
  }

  // Sluice not answering still fails open.
  const { c: gone } = await unreachable({ failPolicy: "open" });
  const fell = await gone.limit(name, { key: "alice" }, { idempotencyKey: "order-e-1" });
  assert.ok(fell.ok && fell.degraded, JSON.stringify(fell));
});

test("the names . and .. (which fetch resolves away) and keys with a lone surrogate are refused before sending", async () => {
  const { c, f } = await unreachable({ failPolicy: "open" });
  for (const name of [".", ".."]) {
    await assert.rejects(c.getLimit(name), (err) => err instanceof TypeError && /nor "\." or "\.\."/.test(err.message), `getLimit(${name})`);
    await assert.rejects(c.deleteLimit(name), TypeError, `deleteLimit(${name})`);
    await assert.rejects(c.limit(name), TypeError, `limit(${name})`);
    const [item] = await c.bulk([{ name }]);
    assert.ok(item.error instanceof TypeError, `bulk item ${name}: ${JSON.stringify(item)}`);
  }
  await assert.rejects(c.limit("x", { key: "u\ud800" }), /lone surrogate/);
  await assert.rejects(c.limit("x", { attributes: { org: "\udc00" } }), /lone surrogate/);
  // Sluice would act on the U+FFFD key: a reset or refund meant for "a\ud800" would reach "a\ufffd".
  await assert.rejects(c.refund("x", { key: "a\ud800", count: 1 }), /lone surrogate/, "refund's key");
  await assert.rejects(c.refund("x", { count: 1, attributes: { org: "\ud800" } }), /lone surrogate/, "refund's attributes");
  await assert.rejects(c.reset("x", "a\ud800"), /lone surrogate/, "reset");
  await assert.rejects(c.value("x", "a\ud800"), /lone surrogate/, "value");
  await assert.rejects(c.hold({ limits: [{ name: "x", key: "k" }, { name: "x", key: "a\ud800" }], ttl: 1000 }), /hold item 1 \(x\).*lone surrogate/, "hold's key");
  await assert.rejects(c.hold({ limits: [{ name: "x", attributes: { "\udc00": "v" } }], ttl: 1000 }), /lone surrogate/, "hold's attributes");
  assert.equal(f.calls, 0, "nothing was sent");
});

test("a bulk item answered with a 5xx problem of its own follows the fail policy", async () => {
  // A fake answer: the real Sluice cannot be made to fail one item of a bulk request on demand.
  const answer = {
    results: [
      { error: { type: "about:blank", title: "Service Unavailable", status: 503, code: "unavailable", detail: "try later" } },
      { ok: true, retryAfter: null, remaining: 4, name: "b", key: "k" },
      { error: { type: "about:blank", title: "Bad Request", status: 400, code: "invalid_request", detail: "no", field: "decisions[2].key" } },
    ],
  };
  const fake = async () => new Response(JSON.stringify(answer), { status: 200, headers: { "Content-Type": "application/json" } });
  const items = [
    { name: "a", key: "k" },
    { name: "b", key: "k" },
    { name: "c", key: "k" },
  ];
  const open = await new Sluice({ baseUrl: "http://sluice.invalid", secretKey: "sk", fetch: fake, failPolicy: "open" }).bulk(items);
  assert.ok(open[0].ok && open[0].degraded && open[0].name === "a", `the 503 item: ${JSON.stringify(open[0])}`);
  assert.ok(open[1].ok && !open[1].degraded && open[1].remaining === 4, `the decided item: ${JSON.stringify(open[1])}`);
  assert.ok(open[2].error instanceof SluiceError && open[2].error.status === 400, `the 400 item: ${JSON.stringify(open[2])}`);

  const closed = await new Sluice({ baseUrl: "http://sluice.invalid", secretKey: "sk", fetch: fake }).bulk(items);
  assert.ok(closed[0].error instanceof SluiceError && closed[0].error.status === 503, `fail closed: ${JSON.stringify(closed[0])}`);
});

test("a retried delete answered 404 after Sluice's own 503 is an error", async () => {
  // Sluice's 503 problem means it did nothing: the retry's 404 says the limit never existed (or
  // another caller deleted it). A fake: the real Sluice cannot be made to answer 503 on demand.
  let calls = 0;
  const fake = async () => {
    calls++;
    const [status, code] = calls === 1 ? [503, "unavailable"] : [404, "limit_not_found"];
    return new Response(JSON.stringify({ type: "about:blank", title: "x", status, code, detail: "x" }), {
      status,
      headers: { "Content-Type": "application/problem+json" },
    });
  };
  const c = new Sluice({ baseUrl: "http://sluice.invalid", secretKey: "sk", fetch: fake, retries: 2, backoffMs: 1, maxBackoffMs: 2 });
  const e = await problemOf(c.deleteLimit("never"));
  assert.equal(e.code, "limit_not_found");
  assert.equal(calls, 2, "the 503 and its retry");
});

test("a retried delete whose first answer was lost succeeds", async () => {
  // A fetch that forwards every request to the real Sluice but loses the answer of the first
  // DELETE (a network error after Sluice deleted, or with asPage a proxy's 503 page instead of
  // Sluice's answer): the retry then finds nothing (404).
  const losing = (asPage = false) => {
    const f = async (input, init) => {
      f.calls++;
      const resp = await fetch(input, init);
      if (init?.method === "DELETE" && !f.lost) {
        f.lost = true;
        await resp.arrayBuffer();
        if (asPage) return new Response("<html>503 Service Temporarily Unavailable</html>", { status: 503, headers: { "Content-Type": "text/html" } });
        throw new TypeError("fetch failed (the answer was lost)");
      }
      return resp;
    };
    f.calls = 0;
    f.lost = false;
    return f;
  };
  const fast = { retries: 2, backoffMs: 1, maxBackoffMs: 4 };
  const name = limitName("lostdelete");
  await putBucket(client(), name, 5);
  let f = losing();
  await client({ ...fast, fetch: f }).deleteLimit(name);
  assert.equal(f.calls, 2, "the lost attempt and its retry");
  await assert.rejects(client().getLimit(name), (e) => e instanceof SluiceError && e.code === "limit_not_found");

  const hook = await client().createWebhook("http://127.0.0.1:1/hook", ["limit.refusals"], { refusalThreshold: 7 });
  assert.equal(hook.refusalThreshold, 7);
  f = losing(true);
  await client({ ...fast, fetch: f }).deleteWebhook(hook.id);
  assert.equal(f.calls, 2);

  const e = await problemOf(client(fast).deleteWebhook(hook.id));
  assert.equal(e.status, 404, "a first attempt answered 404 is still an error");
});

/**
 * A fetch to the real Sluice whose 200 answers to requests whose path passes match get body in
 * place of Sluice's (a proxy or a broken Sluice answering 200 with something else).
 */
function rewritingFetch(body, match = (path) => /\/(limit|check)$|^\/v1\/decisions$/.test(path)) {
  return async (input, init) => {
    const r = await fetch(input, init);
    if (r.status !== 200 || !match(new URL(String(input)).pathname)) return r;
    await r.arrayBuffer();
    const headers = new Headers(r.headers);
    headers.delete("Content-Length");
    return new Response(body, { status: 200, headers });
  };
}

/** Asserts that promise rejects with the error of an answer that does not decode, and returns it. */
async function undecodableOf(promise, what) {
  try {
    await promise;
  } catch (err) {
    assert.ok(!(err instanceof SluiceError) && !(err instanceof NoAnswerError) && !(err instanceof TypeError), `${what}: ${err} (${err?.name})`);
    assert.match(err.message, /decode the answer/, what);
    return err;
  }
  assert.fail(`${what}: the call succeeded`);
}

test("a 200 answer without the members a decision requires, or with an empty body, does not decode, whatever the fail policy", async () => {
  const name = limitName("undecodable");
  await putBucket(client(), name, 100);
  for (const body of ["{}", "null", "", '{"ok":null,"retryAfter":null,"remaining":1,"name":"x","key":null}', '{"ok":true,"retryAfter":null,"remaining":1,"key":null}']) {
    for (const failPolicy of ["closed", "open"]) {
      const c = client({ fetch: rewritingFetch(body), failPolicy });
      await undecodableOf(c.limit(name, { key: "k" }), `limit, ${failPolicy}, answered ${JSON.stringify(body)}`);
      await undecodableOf(c.check(name, { key: "k" }), `check, ${failPolicy}, answered ${JSON.stringify(body)}`);
      await undecodableOf(c.batch([{ name, key: "k" }]), `batch, ${failPolicy}, answered ${JSON.stringify(body)}`);
      await undecodableOf(c.bulk([{ name, key: "k" }]), `bulk, ${failPolicy}, answered ${JSON.stringify(body)}`);
    }
  }
  // Any call's empty 200 (a value that resolved undefined).
  await undecodableOf(client({ fetch: rewritingFetch("", () => true) }).value(name, "k"), "value, answered an empty 200");
  // A refund's answer without its members (it was a refund of nothing, no error).
  for (const body of ["{}", "null", '{"name":"x","key":null,"refunded":1}']) {
    const c = client({ fetch: rewritingFetch(body, (path) => path.endsWith("/refund")) });
    await undecodableOf(c.refund(name, { key: "k", count: 1 }), `refund, answered ${JSON.stringify(body)}`);
  }
});

test("a baseUrl with a query or a fragment is refused at construction; a path prefix is kept", async () => {
  for (const baseUrl of [`${sluice.baseUrl}/?x=1`, `${sluice.baseUrl}#f`, `${sluice.baseUrl}?`, `${sluice.baseUrl}/sluice?x=1#f`]) {
    assert.throws(() => new Sluice({ baseUrl, secretKey: sluice.secretKey }), TypeError, baseUrl);
  }
  // A reverse proxy serving Sluice under /sluice/: it strips the prefix (and refuses what lacks it).
  const proxied = [];
  const underPrefix = (input, init) => {
    const u = new URL(String(input));
    if (!u.pathname.startsWith("/sluice/v1/")) return Promise.resolve(new Response("not found", { status: 404 }));
    proxied.push(u.pathname);
    return fetch(`${sluice.baseUrl}${u.pathname.slice("/sluice".length)}${u.search}`, init);
  };
  const name = limitName("prefix");
  for (const baseUrl of ["http://gateway.test/sluice", "http://gateway.test/sluice/"]) {
    const c = new Sluice({ baseUrl, secretKey: sluice.secretKey, fetch: underPrefix });
    await putBucket(c, name, 10);
    assert.equal((await c.limit(name, { key: "k" })).ok, true, baseUrl);
    assert.ok((await c.value(name, "k")).value < 10, baseUrl);
  }
  assert.ok(proxied.length >= 6 && proxied.every((p) => p.startsWith("/sluice/v1/limits/")), JSON.stringify(proxied));
});
