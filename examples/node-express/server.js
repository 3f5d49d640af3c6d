// An Express service rate-limited by Sluice with @sluice/client's middleware: every client
// address may call GET /hello 5 times a minute, and every user (X-User, a stand-in for real
// authentication) may spend 10 tokens a minute on POST /reports, a report costing what its
// `pages` query parameter says.
//
// It needs a Sluice server and a tenant's secret key (see README.md):
//
//	SLUICE_SECRET_KEY=sk_live_… npm start
import express from "express";
import { Sluice } from "@sluice/client";
import { keyByClientIP, keyByUser, rateLimit } from "@sluice/client/middleware";

const url = process.env.SLUICE_URL || "http://localhost:8080";
const secretKey = process.env.SLUICE_SECRET_KEY;
const [host, port] = splitAddr(process.env.ADDR || "localhost:8083");
if (!secretKey) {
  console.error("node-express: set SLUICE_SECRET_KEY to a tenant's secret key (sk_live_…)");
  process.exit(1);
}

// Fail open: when Sluice cannot answer within 500 ms, serve the request anyway.
const sluice = new Sluice({ baseUrl: url, secretKey, timeoutMs: 500, failPolicy: "open" });

// Define (or redefine) the limits; PUT is idempotent.
await sluice.putLimit("examples.express.hello", { kind: "token bucket", rate: 5, period: 60_000 });
await sluice.putLimit("examples.express.reports", { kind: "token bucket", rate: 10, period: 60_000 });

const app = express();
// Behind a proxy, name it: keyByClientIP(["10.0.0.0/8"]) believes X-Forwarded-For from it alone.
const trustedProxies = (process.env.TRUSTED_PROXIES || "").split(",").filter(Boolean);

app.get("/hello", rateLimit({ client: sluice, name: "examples.express.hello", key: keyByClientIP(trustedProxies) }), (req, res) => {
  res.json({ hello: "world", remaining: req.sluice.remaining });
});

// A stand-in for authentication middleware (Passport and the like set req.user).
const authenticate = (req, res, next) => {
  const user = req.get("X-User");
  if (!user) return res.status(401).json({ error: "send X-User" });
  req.user = { id: user };
  next();
};

app.post(
  "/reports",
  authenticate,
  rateLimit({
    client: sluice,
    name: "examples.express.reports",
    key: keyByUser(),
    count: (req) => {
      const pages = Number(req.query.pages ?? 1);
      if (!Number.isInteger(pages) || pages < 1 || pages > 10) throw new Error("pages must be 1 to 10");
      return pages;
    },
    // Replace the default 429 problem with the service's own error shape.
    handler: (req, res) => res.status(429).json({ error: "report budget spent", retryAfterMs: req.sluice.retryAfter }),
  }),
  (req, res) => res.status(201).json({ report: "queued", user: req.user.id }),
);

const server = app.listen(Number(port), host, () => console.log(`node-express is listening on http://${host}:${server.address().port}`));
for (const signal of ["SIGINT", "SIGTERM"]) process.once(signal, () => server.close(() => process.exit(0)));

function splitAddr(addr) {
  const i = addr.lastIndexOf(":");
  return [addr.slice(0, i) || "localhost", addr.slice(i + 1)];
}
