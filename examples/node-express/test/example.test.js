// Runs the example as its README says (`npm start`, with SLUICE_URL, SLUICE_SECRET_KEY and ADDR)
// against a real Sluice, and checks a 200, then a 429. The Sluice comes from the TypeScript
// client's test helper (built from this repository's root), so the client's tests must have
// been compiled first (`make test-ts` does that).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

import { freeAddr, startSluice } from "../../../client/typescript/dist/test/server.js";

const exampleDir = fileURLToPath(new URL("..", import.meta.url));
let sluice; // { baseUrl, secretKey, stop }
let example; // { url, stop }

/** Starts `npm start` in the example's directory and waits (up to 5 minutes: it installs and builds first) until it listens. */
async function startExample(env) {
  const addr = await freeAddr();
  // detached: npm and the node it starts are a process group of their own, stopped together.
  const child = spawn("npm", ["start"], { cwd: exampleDir, env: { ...process.env, ...env, ADDR: addr }, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let output = "";
  child.stderr.on("data", (b) => (output += b));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve(`exited (code ${code}, signal ${signal})`)));
  const listening = new Promise((resolve) => {
    createInterface({ input: child.stdout }).on("line", (line) => {
      output += line + "\n";
      if (line.startsWith("node-express is listening on")) resolve("listening");
    });
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid, "SIGTERM");
    await exited;
  };
  let timer;
  const started = await Promise.race([
    listening,
    exited,
    new Promise((resolve) => (timer = setTimeout(resolve, 300_000, "not listening after 5 minutes"))),
  ]);
  clearTimeout(timer);
  if (started !== "listening") {
    await stop().catch(() => {});
    throw new Error(`npm start ${started}\n${output}`);
  }
  return { url: `http://${addr}`, stop };
}

before(async () => {
  sluice = await startSluice();
  example = await startExample({ SLUICE_URL: sluice.baseUrl, SLUICE_SECRET_KEY: sluice.secretKey });
});

after(async () => {
  await example?.stop();
  await sluice?.stop();
});

test("GET /hello: 5 a minute per client address, then 429 with Retry-After and a problem", async () => {
  for (let i = 0; i < 5; i++) {
    const r = await fetch(`${example.url}/hello`);
    const text = await r.text();
    assert.equal(r.status, 200, text);
    assert.equal(r.headers.get("RateLimit-Policy"), '"examples.express.hello";q=5;w=60');
    assert.equal(JSON.parse(text).hello, "world");
  }
  const refused = await fetch(`${example.url}/hello`);
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get("Content-Type"), "application/problem+json");
  assert.ok(Number(refused.headers.get("Retry-After")) >= 1, `Retry-After ${refused.headers.get("Retry-After")}`);
  assert.equal((await refused.json()).code, "rate_limited");
});

test("POST /reports: 10 pages a minute per user, and the service's own 429", async () => {
  const post = (user, pages) => fetch(`${example.url}/reports?pages=${pages}`, { method: "POST", headers: user ? { "X-User": user } : {} });
  assert.equal((await post("ann", 7)).status, 201);
  const over = await post("ann", 4);
  assert.equal(over.status, 429);
  const body = await over.json();
  assert.equal(body.error, "report budget spent");
  assert.ok(body.retryAfterMs > 0, JSON.stringify(body));
  assert.equal((await post("ann", 3)).status, 201, "what is left still fits");
  assert.equal((await post("bob", 10)).status, 201, "bob has his own budget");
  assert.equal((await post("bob", 11)).status, 400, "a count the service refuses");
  assert.equal((await post(undefined, 1)).status, 401);
});
