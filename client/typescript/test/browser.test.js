// The captcha helper in a real browser: headless Chromium loads a tenant's page from another
// origin than Sluice's, whose module imports the compiled dist/src/captcha.js as it would ship;
// the page fetches a challenge from Sluice across origins (the tenant allows the page's origin,
// set through the dashboard as a person would), solves it with the browser's Web Crypto, and
// posts it to the page's backend, which authorizes the session with the secret key.
//
// Without chromium the test is skipped with a loud message, except under CI=true where it fails
// (a silently skipped browser test would hide a broken helper), as the Go browser tests do.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Sluice } from "../src/index.js";
import { startSluice } from "./server.js";

const run = promisify(execFile);

async function findChromium() {
  for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
    try {
      const { stdout } = await run("sh", ["-c", `command -v ${name}`]);
      if (stdout.trim()) return stdout.trim();
    } catch {
      // not this one
    }
  }
  return undefined;
}

/** Allows origin to fetch the tenant's captcha challenges, through the dashboard: a user, a login, the captcha settings form. */
async function allowOrigin(s, origin) {
  const email = "ts-browser@example.com";
  const password = "correct horse battery staple";
  const child = execFile(s.bin, ["user", "create", "--email", email, "--password-stdin", "--tenant", "clienttests"], { cwd: s.dir, env: s.env });
  child.stdin.end(`${password}\n`);
  await new Promise((resolve, reject) => child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`user create exited ${code}`)))));

  const login = await fetch(`${s.baseUrl}/login`, { method: "POST", body: new URLSearchParams({ email, password }), redirect: "manual" });
  const setCookies = login.headers.getSetCookie?.() ?? [login.headers.get("Set-Cookie") ?? ""];
  const cookie = setCookies.map((c) => c.split(";")[0]).join("; ");
  assert.ok(login.status === 303 || login.status === 302, `login answered ${login.status}`);
  assert.ok(cookie, "login set no cookie");
  // The dashboard's home sends a tenant's user to the tenant's pages.
  const home = await fetch(`${s.baseUrl}/`, { headers: { Cookie: cookie }, redirect: "manual" });
  const tenantPath = /^\/tenants\/\d+/.exec(home.headers.get("Location") ?? "")?.[0];
  assert.ok(tenantPath, `the dashboard's home redirected to ${home.headers.get("Location")}`);
  const saved = await fetch(`${s.baseUrl}${tenantPath}/captcha/settings`, {
    method: "POST",
    headers: { Cookie: cookie },
    body: new URLSearchParams({ origins: origin, difficulty: "50000" }),
    redirect: "manual",
  });
  assert.ok(saved.status < 400, `saving the captcha settings answered ${saved.status}: ${await saved.text()}`);
}

const page = (sluiceUrl, publishableKey) => `<!doctype html>
<meta charset="utf-8">
<title>a tenant's page</title>
<script type="module">
import { solveCaptcha } from "/captcha.js";
const report = (r) => fetch("/done", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(r) });
solveCaptcha({ baseUrl: ${JSON.stringify(sluiceUrl)}, publishableKey: ${JSON.stringify(publishableKey)}, submit: "/captcha/solved" })
  .then((r) => report({ sessionId: r.sessionId, authorization: r.authorization, secure: isSecureContext }))
  .catch((e) => report({ error: String(e && e.stack || e) }));
</script>`;

test("the captcha helper runs in Chromium against the real server", async (t) => {
  const chromium = await findChromium();
  if (!chromium) {
    const msg = "\n\n*** BROWSER TEST NOT RUN: no chromium on PATH (apt-get install chromium). ***\n*** The captcha helper is UNTESTED in a real browser in this run. ***\n";
    if (process.env.CI === "true") assert.fail(msg);
    t.skip(msg);
    return;
  }
  const sluice = await startSluice();
  t.after(() => sluice.stop());
  const backend = new Sluice({ baseUrl: sluice.baseUrl, secretKey: sluice.secretKey });
  const helper = await readFile(fileURLToPath(new URL("../src/captcha.js", import.meta.url)), "utf8");

  let done;
  const reported = new Promise((resolve) => (done = resolve));
  const seen = [];
  const server = createServer(async (req, res) => {
    seen.push(`${req.method} ${req.url}`);
    let body = "";
    for await (const chunk of req) body += chunk;
    if (req.method === "GET" && req.url === "/") {
      res.setHeader("Content-Type", "text/html; charset=utf-8");
      res.end(page(sluice.baseUrl, sluice.publishableKey));
    } else if (req.method === "GET" && req.url === "/captcha.js") {
      res.setHeader("Content-Type", "text/javascript");
      res.end(helper);
    } else if (req.method === "POST" && req.url === "/captcha/solved") {
      const { sessionId, payload } = JSON.parse(body);
      const a = await backend.authorizeSession(sessionId, payload).catch((e) => ({ error: e.message }));
      res.setHeader("Content-Type", "application/json");
      res.end(JSON.stringify(a));
    } else if (req.method === "POST" && req.url === "/done") {
      res.end();
      done(JSON.parse(body));
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  const origin = `http://127.0.0.1:${server.address().port}`;
  await allowOrigin(sluice, origin);

  const profile = await mkdtemp(join(tmpdir(), "sluice-ts-chromium-"));
  // detached: the browser and its helpers are a process group of their own, ended together.
  const browser = spawn(
    chromium,
    [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
      "--no-default-browser-check",
      `--user-data-dir=${profile}`,
      `${origin}/`,
    ],
    { stdio: ["ignore", "ignore", "pipe"], detached: true },
  );
  let browserLog = "";
  browser.stderr.on("data", (b) => (browserLog = (browserLog + b).slice(-4000)));
  const exited = new Promise((resolve) => browser.once("exit", (code, signal) => resolve(`chromium exited (code ${code}, signal ${signal}) before the page reported`)));
  // Ended as soon as the page has reported: its keep-alive connections would hold up the
  // servers' shutdown.
  const closeBrowser = async () => {
    if (browser.exitCode === null && browser.signalCode === null) process.kill(-browser.pid, "SIGKILL");
    await exited;
    await rm(profile, { recursive: true, force: true });
  };
  t.after(closeBrowser);

  let timer;
  const r = await Promise.race([
    reported,
    exited.then((why) => ({ error: why })),
    new Promise((resolve) => (timer = setTimeout(resolve, 120_000, { error: "the page did not report within 120 s" }))),
  ]);
  clearTimeout(timer);
  await closeBrowser();
  assert.equal(r.error, undefined, `${r.error}\nrequests to the page's server: ${seen.join(", ")}\nchromium: ${browserLog}`);
  assert.equal(r.secure, true, "the page is a secure context (Web Crypto needs one)");
  assert.equal(r.authorization.authorized, true, JSON.stringify(r));
  assert.equal((await backend.getSession(r.sessionId)).authorized, true);
  assert.deepEqual(
    seen.filter((x) => x !== "GET /favicon.ico"),
    ["GET /", "GET /captcha.js", "POST /captcha/solved", "POST /done"],
    "the page's requests",
  );
});
