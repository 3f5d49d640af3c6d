// Webhooks through the client, against a real Sluice (server.js): an endpoint receives the
// tenant's events signed so that verifyWebhook accepts them, and refuses them tampered or stale.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { Sluice, SluiceError, verifyWebhook } from "../src/index.js";
import { startSluice } from "./server.js";

let sluice;
before(async () => {
  sluice = await startSluice();
});
after(async () => {
  await sluice?.stop();
});

test("webhooks: create, receive a verified event, test, log, resend, delete", async () => {
  const c = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey });
  const waiting = [];
  const received = [];
  const receiver = createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const d = { headers: req.headers, body: Buffer.concat(chunks) };
      res.end();
      const w = waiting.shift();
      if (w) w(d);
      else received.push(d);
    });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  const next = (what) =>
    received.length
      ? Promise.resolve(received.shift())
      : new Promise((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`waited 60 s for the server to deliver ${what}`)), 60_000);
          waiting.push((d) => {
            clearTimeout(timer);
            resolve(d);
          });
        });
  try {
    const url = `http://127.0.0.1:${receiver.address().port}/hooks`;
    const hook = await c.createWebhook(url, ["definition.changed"]);
    assert.match(hook.secret, /^whsec_/);
    await c.putLimit("ts.webhooks.one", { kind: "token bucket", rate: 1, period: 1000 });
    const d = await next("the definition.changed event");
    assert.equal(await verifyWebhook(hook.secret, d.headers, d.body), true, "a real delivery verifies");
    // A plain object whose names are capitalised (as some frameworks hand them over) verifies too.
    const capitalised = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k.replace(/(^|-)([a-z])/g, (_, dash, c) => dash + c.toUpperCase()), v]));
    assert.ok("Webhook-Signature" in capitalised && !("webhook-signature" in capitalised));
    assert.equal(await verifyWebhook(hook.secret, capitalised, d.body), true, "a real delivery with capitalised header names verifies");
    assert.equal(JSON.parse(d.body.toString()).type, "definition.changed");
    assert.equal(await verifyWebhook(hook.secret, d.headers, Buffer.concat([d.body, Buffer.from(" ")])), false, "a tampered body");
    // No secret (an unset variable) verifies nothing, and says so rather than throwing.
    for (const empty of ["", "whsec_"]) {
      assert.equal(await verifyWebhook(empty, d.headers, d.body), false, `the secret ${JSON.stringify(empty)}`);
    }
    // Correctly signed, but an hour old: refused for its age alone.
    const old = String(Math.floor(Date.now() / 1000) - 3600);
    const key = Buffer.from(hook.secret.slice("whsec_".length), "base64");
    const sig = createHmac("sha256", key).update(`${d.headers["webhook-id"]}.${old}.`).update(d.body).digest("base64");
    const stale = { ...d.headers, "webhook-timestamp": old, "webhook-signature": `v1,${sig}` };
    assert.equal(await verifyWebhook(hook.secret, stale, d.body, 2 * 3600_000), true, "re-signed, within a 2 h tolerance");
    assert.equal(await verifyWebhook(hook.secret, stale, d.body), false, "a stale timestamp");
    // A tolerance that is not a finite number above 0 (a NaN from an unset setting) is the
    // default's, never "any age".
    for (const tolerance of [Number.NaN, Number.POSITIVE_INFINITY, 0, -1]) {
      assert.equal(await verifyWebhook(hook.secret, stale, d.body, tolerance), false, `a stale timestamp with tolerance ${tolerance}`);
    }

    await c.sendTestWebhook(hook.id);
    const t = await next("the test event");
    assert.equal(JSON.parse(t.body.toString()).type, "webhook.test");
    const log = await c.webhookDeliveries(hook.id, 10);
    assert.equal(log.length, 2);
    await c.resendWebhookDelivery(hook.id, log[log.length - 1].id);
    const again = await next("the resent delivery");
    assert.equal(again.headers["webhook-id"], d.headers["webhook-id"], "a resend keeps the webhook-id");
    assert.ok((await c.listWebhooks()).some((w) => w.id === hook.id && !("secret" in w)));
    await c.deleteWebhook(hook.id);
    await assert.rejects(c.webhookDeliveries(hook.id), (e) => e instanceof SluiceError && e.status === 404);
    await assert.rejects(c.createWebhook("ftp://nope.example/", ["key.created"]), (e) => e instanceof SluiceError && e.field === "url");
    await assert.rejects(c.deleteWebhook(-1), TypeError);
  } finally {
    receiver.close();
  }
});

test("refund: gives tokens back, never above the limit; bad counts are refused before sending", async () => {
  const c = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey });
  await c.putLimit("ts.refund.one", { kind: "fixed window", rate: 10, period: 3_600_000 });
  await c.limit("ts.refund.one", { key: "k", count: 6 });
  let r = await c.refund("ts.refund.one", { key: "k", count: 4 });
  assert.deepEqual([r.refunded, r.remaining, r.key], [4, 8, "k"]);
  r = await c.refund("ts.refund.one", { key: "k", count: 50 });
  assert.deepEqual([r.refunded, r.remaining], [2, 10]);
  await assert.rejects(c.refund("ts.refund.one", { key: "k", count: -1 }), TypeError);
  await assert.rejects(c.refund("ts.refund.nope", { count: 1 }), (e) => e instanceof SluiceError && e.code === "limit_not_found");
});

test("holds and leases: settled once, refused when full, released", async () => {
  const c = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey });
  await c.putLimit("ts.hold.tokens", { kind: "fixed window", rate: 10, period: 3_600_000 });
  await c.putLimit("ts.lease.jobs", { kind: "concurrency", rate: 1, leaseTtl: 60_000 });
  const h = await c.hold({ limits: [{ name: "ts.hold.tokens", key: "k", count: 6 }], ttl: 60_000 });
  assert.match(h.holdId, /^hold_/);
  const s = await c.settleHold(h.holdId, [2]);
  assert.deepEqual([s.limits[0].charged, s.limits[0].refunded], [2, 4]);
  await assert.rejects(c.settleHold(h.holdId, [2]), (e) => e instanceof SluiceError && e.code === "hold_closed");
  const l = await c.limit("ts.lease.jobs", { key: "w" });
  assert.ok(l.ok && l.leaseId);
  assert.equal((await c.limit("ts.lease.jobs", { key: "w" })).ok, false);
  assert.ok((await c.extendLease(l.leaseId)).expiresAt >= l.expiresAt);
  await c.releaseLease(l.leaseId);
  assert.equal((await c.limit("ts.lease.jobs", { key: "w" })).ok, true);
});

/**
 * A fetch that sends every request to the real Sluice but loses the answer of the next one when
 * armed (it rejects, as when a connection drops after the request was carried out), recording
 * the lost answer's body and the Idempotency-Key of each request.
 */
function losingFetch() {
  const f = async (input, init) => {
    f.calls++;
    f.keys.push(init?.headers?.["Idempotency-Key"]);
    const resp = await fetch(input, init);
    if (f.armed) {
      f.armed = false;
      f.lost = await resp.text();
      throw new TypeError("fetch failed: the answer was lost");
    }
    return resp;
  };
  f.arm = () => {
    f.armed = true;
    f.calls = 0;
    f.keys = [];
  };
  f.calls = 0;
  f.keys = [];
  return f;
}

test("hold and lease calls send the idempotencyKey and are retried only with one", async () => {
  const direct = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey });
  await direct.putLimit("ts.idem.tokens", { kind: "fixed window", rate: 100, period: 3_600_000 });
  await direct.putLimit("ts.idem.jobs", { kind: "concurrency", rate: 1, leaseTtl: 60_000 });
  const f = losingFetch();
  const c = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey, retries: 2, backoffMs: 1, maxBackoffMs: 4, fetch: f });
  const value = async () => (await direct.value("ts.idem.tokens", "k")).value;
  const body = { limits: [{ name: "ts.idem.tokens", key: "k", count: 10 }], ttl: 60_000 };

  // Without a key: one attempt, no header; the lost hold was made (released here by hand).
  f.arm();
  await assert.rejects(c.hold(body));
  assert.deepEqual([f.calls, f.keys], [1, [undefined]], "a hold without a key is never retried");
  await direct.releaseHold(JSON.parse(f.lost).holdId);

  // With a key: retried, the retry is the first hold (same holdId), held once.
  f.arm();
  const h = await c.hold(body, { idempotencyKey: "ts-hold" });
  assert.deepEqual([f.calls, f.keys], [2, ["ts-hold", "ts-hold"]]);
  assert.equal(h.replayed, true);
  assert.equal(h.holdId, JSON.parse(f.lost).holdId, "the retry answers the hold the lost answer made");
  assert.equal(await value(), 90);

  f.arm();
  const s = await c.settleHold(h.holdId, [4], { idempotencyKey: "ts-settle" });
  assert.deepEqual([f.calls, f.keys, s.limits[0].charged, s.limits[0].refunded], [2, ["ts-settle", "ts-settle"], 4, 6]);
  assert.equal(await value(), 96, "settled once");

  const h2 = await direct.hold({ limits: [{ name: "ts.idem.tokens", key: "k", count: 5 }], ttl: 60_000 });
  f.arm();
  await c.releaseHold(h2.holdId, { idempotencyKey: "ts-release" });
  assert.deepEqual([f.calls, f.keys], [2, ["ts-release", "ts-release"]], "the retried release is the first 204, not 409 hold_closed");
  assert.equal(await value(), 96);

  const l = await direct.limit("ts.idem.jobs", { key: "w" });
  assert.ok(l.ok && l.leaseId);
  f.arm();
  assert.ok((await c.extendLease(l.leaseId, { idempotencyKey: "ts-extend" })).expiresAt >= l.expiresAt);
  assert.deepEqual([f.calls, f.keys], [2, ["ts-extend", "ts-extend"]]);
  f.arm();
  await c.releaseLease(l.leaseId, { idempotencyKey: "ts-lease-release" });
  assert.deepEqual([f.calls, f.keys], [2, ["ts-lease-release", "ts-lease-release"]]);
  const again = await direct.limit("ts.idem.jobs", { key: "w" });
  assert.ok(again.ok, "the slot is free after the release");
  await direct.releaseLease(again.leaseId);

  // Without a key a settle is not retried either.
  const h3 = await direct.hold({ limits: [{ name: "ts.idem.tokens", key: "k", count: 1 }], ttl: 60_000 });
  f.arm();
  await assert.rejects(c.settleHold(h3.holdId, [1]));
  assert.deepEqual([f.calls, f.keys], [1, [undefined]]);
});
