/**
 * An Express-style middleware, `(req, res, next)`, that limits each request with a Sluice limit.
 * It has no runtime dependencies and imports nothing of Node or Express: it works with Express
 * 4 and 5, with Connect-style routers, and with a plain node:http server (call it with a `next`
 * of your own).
 *
 * Each request consumes one token (or what `count` says) of its key with {@link Sluice.limit}.
 * The RateLimit-Policy and RateLimit headers Sluice answered with go on to the response; a
 * refusal is a 429 with Retry-After and a problem+json body (or what `handler` writes). When
 * Sluice cannot answer, the client's fail policy decides: 'open' lets the request through
 * (without RateLimit headers), 'closed' answers 503. On a concurrency limit the request's lease
 * is released when its response closes. A visitor who hangs up while Sluice decides (its
 * response closes first) gets nothing: the decision is awaited, a lease it took is released at
 * once, and neither the next handlers nor `handler` nor `onError` run.
 */
import { Sluice, SluiceError, type Result } from "./index.js";

/** What the middleware reads of a request: Node's IncomingMessage (and so Express's req) has it. */
export interface RequestLike {
  headers: Record<string, string | string[] | undefined>;
  socket?: { remoteAddress?: string | undefined } | null;
  /** Node's headers with every value a list (Node 18.3 and later): keyByHeader reads the first. */
  headersDistinct?: Record<string, string[] | undefined>;
  /** Set by the middleware: the decision made for this request (absent when none was). */
  sluice?: Result;
}

/** What the middleware writes of a response: Node's ServerResponse (and so Express's res) has it. */
export interface ResponseLike {
  statusCode: number;
  setHeader(name: string, value: string): unknown;
  end(body?: string): unknown;
  /**
   * Node's ServerResponse emits "close" once the response is done (sent or abandoned): on a
   * concurrency limit the middleware releases the request's lease then, and a response closed
   * before the decision's answer (the visitor hung up) is not passed on. A response without it
   * keeps the lease until its leaseTtl.
   */
  once?(event: "close", listener: () => void): unknown;
  /** Node's ServerResponse: true once the response is closed (a visitor who hung up before). */
  closed?: boolean;
  /** Node's ServerResponse: true once its stream is destroyed. */
  destroyed?: boolean;
}

/** Passes the request on (no argument) or to the error handlers (an error). */
export type Next = (err?: unknown) => void;

/**
 * Names the key a request is limited under; undefined or "" is the limit's single global key (as
 * "" is in the Go middleware). What it throws (or rejects with) means the request cannot be
 * limited: 400 by default, as for a key Sluice refuses (over 256 bytes of UTF-8, starting with
 * "ip:" or "session:", which Sluice reserves) or one holding a lone surrogate.
 */
export type KeyFunction<Req extends RequestLike = RequestLike> = (req: Req) => string | undefined | Promise<string | undefined>;

/** Says how many tokens a request costs (default 1). What it throws is treated as a key function's. */
export type CountFunction<Req extends RequestLike = RequestLike> = (req: Req) => number | Promise<number>;

/** The options of {@link rateLimit}. */
export interface RateLimitOptions<Req extends RequestLike = RequestLike, Res extends ResponseLike = ResponseLike> {
  /** The client the decisions go through: its timeout and fail policy apply. */
  client: Sluice;
  /** The limit's name (a definition stored in Sluice). */
  name: string;
  /** Default: {@link keyByClientIP} with no trusted proxy (the connection's peer). */
  key?: KeyFunction<Req>;
  /** Default: 1 token per request. */
  count?: CountFunction<Req>;
  /**
   * Answers a refusal instead of the default 429 problem. The RateLimit and Retry-After headers are
   * set already; `req.sluice` is the refused result.
   */
  handler?: (req: Req, res: Res, next: Next, result: Result) => void | Promise<void>;
  /**
   * Answers when no decision could be made instead of the defaults: 400 when the request has no
   * key Sluice can take (the key or count function failed: a {@link KeyError}; or Sluice refused
   * the key, a SluiceError 400 of field "key"); 429 tenant_quota_exceeded with Retry-After (whole
   * seconds, at least 1) when the tenant's plan refused the decision (its decisions per second),
   * reported to `log`; 413 count_exceeds_capacity when the count function's count is more than
   * the limit can ever admit (the request's doing), reported to `log` at most once a minute; 500 when Sluice refused the decision itself as invalid (an unknown limit, a
   * revoked key: a mistake of this service's configuration, reported to `log`); 503 with
   * Retry-After (1 s, or what the failed answer asked for: a gateway's 429) when Sluice could not
   * answer (a gateway's 429 in front of it included) and the fail policy is 'closed'.
   */
  onError?: (err: unknown, req: Req, res: Res, next: Next) => void | Promise<void>;
  /** Requests for which it returns true are not limited (health checks, say). */
  skip?: (req: Req) => boolean;
  /** Where the default onError reports failures (default console.warn; null: nowhere). */
  log?: ((message: string, err: unknown) => void) | null;
}

/** The key or count function failed: the request cannot be limited. Its cause is what it threw. */
export class KeyError extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "KeyError";
  }
}

/**
 * Returns middleware that limits each request with the limit options.name (see the module's
 * documentation). Errors of the handlers themselves go to next(err), never unhandled.
 */
export function rateLimit<Req extends RequestLike = RequestLike, Res extends ResponseLike = ResponseLike>(
  options: RateLimitOptions<Req, Res>,
): (req: Req, res: Res, next: Next) => Promise<void> {
  const { client, name, skip } = options;
  if (!(client instanceof Sluice)) throw new TypeError("sluice: rateLimit: options.client must be a Sluice client");
  if (typeof name !== "string" || name === "") throw new TypeError("sluice: rateLimit: options.name must be a limit's name");
  const key: KeyFunction<Req> = options.key ?? keyByClientIP();
  const count = options.count;
  const log = options.log === undefined ? (m: string, e: unknown) => console.warn(m, e) : options.log;
  const handler = options.handler ?? refuse;
  // When the default onError last reported a request costing more than the limit can ever
  // admit (the count function's, so the visitor's doing): at most once a minute.
  const oversized = { at: -Infinity };
  const onError = options.onError ?? ((err: unknown, _req: Req, res: Res) => fail(err, res, name, log, count === undefined ? undefined : oversized));

  return async (req, res, next) => {
    try {
      if (skip?.(req)) return next();
      // A concurrency limit counts requests in flight: a request's slot is free once it is
      // answered (its response closes), not when the lease's TTL runs out. The listener goes on
      // first: a visitor who hangs up while the key or count functions or Sluice decide closes
      // the response then, and a listener added later would never hear it (one who hung up
      // before this middleware ran is seen by res.closed / res.destroyed).
      let closed = res.closed === true || res.destroyed === true;
      let lease: string | undefined;
      const release = (id: string) => {
        // Never under an Idempotency-Key: the decision is sent without one, and the release
        // without any per-call option. A failure only leaves the slot to the lease's TTL.
        client.releaseLease(id).catch((err: unknown) => log?.(`sluice: a request's concurrency lease on limit ${name} was not released; it ends at its leaseTtl`, err));
      };
      res.once?.("close", () => {
        closed = true;
        if (lease !== undefined) release(lease);
      });
      let k: string | undefined;
      let n: number | undefined;
      try {
        k = await key(req);
        if (k !== undefined && typeof k !== "string") throw new TypeError(`the key is a ${typeof k}, not a string`);
        if (k === "") k = undefined; // the global key, as in the Go middleware (Sluice takes no "" key)
        // A lone surrogate would reach Sluice as U+FFFD: keys differing only there would share a bucket.
        if (k !== undefined && /\p{Cs}/u.test(k)) throw new TypeError("the key holds a lone surrogate");
        if (count) {
          n = await count(req);
          // Sluice takes no count above 1e15, whatever the limit: the request cannot be limited.
          if (typeof n !== "number" || !(n >= 0 && n <= 1e15)) throw new TypeError(`the count ${String(n)} is not a number of tokens from 0 to 1e15`);
        }
      } catch (err) {
        if (closed) return; // the visitor is gone: nobody to answer
        return await onError(new KeyError(`sluice: the request cannot be limited: ${(err as Error)?.message ?? String(err)}`, err), req, res, next);
      }
      if (closed) return; // the visitor hung up before the decision: nothing to decide for nobody
      let r: Result;
      try {
        r = await client.limit(name, { ...(k === undefined ? {} : { key: k }), ...(n === undefined ? {} : { count: n }) });
      } catch (err) {
        if (closed) return; // the visitor is gone: nobody to answer
        return await onError(err, req, res, next);
      }
      if (closed) {
        // The visitor hung up while Sluice decided: a lease taken for it is released at once,
        // and neither the next handlers nor a refusal's handler run for nobody.
        if (r.ok && r.leaseId !== undefined) release(r.leaseId);
        return;
      }
      req.sluice = r;
      if (r.rateLimitPolicy !== undefined) res.setHeader("RateLimit-Policy", r.rateLimitPolicy);
      if (r.rateLimit !== undefined) res.setHeader("RateLimit", r.rateLimit);
      if (r.ok) {
        lease = r.leaseId; // released by the listener above when the response closes
        return next();
      }
      if (r.retryAfter !== null && r.retryAfter > 0) res.setHeader("Retry-After", String(Math.ceil(r.retryAfter / 1000)));
      await handler(req, res, next, r);
    } catch (err) {
      next(err);
    }
  };
}

/**
 * The default refusal: 429 with a problem body like Sluice's own, but naming the limit the
 * middleware decides on: where that limit has parents (nested budgets) and one of them refused,
 * Sluice's own 429 would name that parent; the RateLimit headers name every limit of the family.
 */
function refuse(_req: RequestLike, res: ResponseLike, _next: Next, r: Result): void {
  const p: Record<string, unknown> = {
    type: "about:blank",
    title: "Too Many Requests",
    status: 429,
    detail: "rate limit exceeded; retry later",
    code: "rate_limited",
    name: r.name,
  };
  if (r.retryAfter !== null && r.retryAfter > 0) p["retryAfter"] = Math.ceil(r.retryAfter);
  writeProblem(res, 429, p);
}

/** How often at most the default onError reports requests costing more than the limit can ever admit. */
const oversizedLogEveryMs = 60_000;

/** The default onError. */
function fail(err: unknown, res: ResponseLike, name: string, log: ((m: string, e: unknown) => void) | null, oversized?: { at: number }): void {
  // Sluice refusing the key (too long, reserved) is the visitor's doing, as the key comes from the request.
  const keyRefused = err instanceof SluiceError && err.status === 400 && err.code === "invalid_request" && err.field === "key";
  if (err instanceof KeyError || keyRefused) {
    writeProblem(res, 400, { type: "about:blank", title: "Bad Request", status: 400, detail: "the request cannot be rate limited", code: "invalid_request" });
    return;
  }
  if (oversized && err instanceof SluiceError && err.code === "count_exceeds_capacity") {
    // The count function's count (the visitor's request: its size, say) is more than the limit
    // can ever admit: no retry will pass, and it is the request's doing, not a mistake of this
    // service's configuration. Reported at most once a minute: visitors decide how often.
    const now = Date.now();
    if (now - oversized.at >= oversizedLogEveryMs) {
      oversized.at = now;
      log?.(`sluice: a request costs more than limit ${name} can ever admit; answering 413 (reported at most once a minute)`, err);
    }
    writeProblem(res, 413, {
      type: "about:blank",
      title: "Content Too Large",
      status: 413,
      detail: "the request costs more than the rate limit can ever admit",
      code: "count_exceeds_capacity",
      name,
    });
    return;
  }
  if (err instanceof SluiceError && err.code === "tenant_quota_exceeded") {
    // The tenant's plan refused: Sluice answered "not now", like a limit's own refusal; not a failure.
    log?.(`sluice: the tenant's plan refused the decision on limit ${name}; refusing the request`, err);
    const retryAfter = err.retryAfter !== null && err.retryAfter > 0 ? Math.ceil(err.retryAfter) : 1000;
    res.setHeader("Retry-After", String(Math.max(Math.ceil(retryAfter / 1000), 1)));
    writeProblem(res, 429, {
      type: "about:blank",
      title: "Too Many Requests",
      status: 429,
      detail: "too many requests; retry later",
      code: "tenant_quota_exceeded",
      retryAfter,
    });
    return;
  }
  if ((err instanceof SluiceError && err.status > 0 && err.status < 500 && !gatewayRefused(err)) || err instanceof TypeError) {
    // Sluice answered (or the client found) that the decision itself is wrong: this service's
    // mistake, not the visitor's.
    log?.(`sluice: the decision on limit ${name} was refused as invalid`, err);
    writeProblem(res, 500, { type: "about:blank", title: "Internal Server Error", status: 500, detail: "internal error", code: "internal" });
    return;
  }
  log?.(`sluice: no decision on limit ${name}; refusing the request (fail closed)`, err);
  // 1 s, or what the failed answer asked for (a gateway's 429, a 503 asking for longer).
  const wait = err instanceof SluiceError && err.retryAfter !== null && err.retryAfter > 0 ? Math.ceil(err.retryAfter / 1000) : 1;
  res.setHeader("Retry-After", String(Math.max(wait, 1)));
  writeProblem(res, 503, { type: "about:blank", title: "Service Unavailable", status: 503, detail: "the rate limiter is unavailable; retry later", code: "unavailable" });
}

/** A 429 that is not Sluice's problem: a gateway in front of Sluice, which the client's fail policy handles as Sluice not answering. */
function gatewayRefused(err: unknown): boolean {
  return err instanceof SluiceError && err.status === 429 && err.code === "";
}

function writeProblem(res: ResponseLike, status: number, p: Record<string, unknown>): void {
  res.statusCode = status;
  res.setHeader("Content-Type", "application/problem+json");
  res.setHeader("Cache-Control", "no-store");
  res.end(JSON.stringify(p));
}

/** Keys requests by the value of a header (the first, if sent twice); a request without it cannot be limited (400). */
export function keyByHeader(name: string): KeyFunction {
  const h = name.toLowerCase();
  return (req) => {
    // Node joins a repeated custom header into one "a, b" in headers; headersDistinct keeps each.
    const v = req.headersDistinct?.[h] ?? req.headers[h];
    const s = Array.isArray(v) ? v[0] : v;
    if (!s) throw new Error(`no ${name} header`);
    return s;
  };
}

/**
 * Keys requests by the authenticated user, read from the request by get (default: `req.user.id`,
 * where Passport and most authentication middleware put it). A request without a user cannot be
 * limited (400): put the middleware after authentication, or key anonymous requests with a
 * function of your own.
 */
export function keyByUser<Req extends RequestLike>(get?: (req: Req) => string | number | undefined | null): KeyFunction<Req> {
  const read = get ?? ((req: Req) => (req as { user?: { id?: string | number } }).user?.id);
  return (req) => {
    const u = read(req);
    if (u === undefined || u === null || u === "") throw new Error("no authenticated user");
    return `user:${u}`;
  };
}

/**
 * Keys requests by the client's address: the connection's peer, or, when the peer is one of
 * trustedProxies (addresses or CIDR prefixes such as "10.0.0.0/8"), the right-most address of
 * X-Forwarded-For that is not a trusted proxy. X-Forwarded-For is never read otherwise, since any
 * client can send it (and Express's req.ip is not used, since it depends on the app's own "trust
 * proxy" setting). An IPv6 address is keyed by its /64: one host usually holds a whole /64.
 * IPv4 peers are trusted only by IPv4 entries, or IPv4-mapped ones of /96 or longer
 * ("::ffff:10.0.0.0/104" is 10.0.0.0/8); any other IPv6 prefix, "::/0" included, trusts IPv6
 * peers only, as in the Go middleware. Throws (at once) on an entry of trustedProxies that is
 * not an address or a prefix, or is an IPv4-mapped prefix shorter than /96.
 */
export function keyByClientIP(trustedProxies: readonly string[] = []): KeyFunction {
  const trusted = trustedProxies.map((s) => {
    const p = parsePrefix(s);
    if (!p) throw new TypeError(`sluice: trusted proxy ${JSON.stringify(s)} is neither an address nor a CIDR prefix`);
    if (p.v4 && p.bits < 96) {
      throw new TypeError(`sluice: trusted proxy ${JSON.stringify(s)} is an IPv4-mapped prefix shorter than /96, which reaches beyond IPv4: write it as an IPv4 prefix`);
    }
    return p;
  });
  const isTrusted = (a: Uint8Array) => trusted.some((p) => contains(p, a));
  return (req) => {
    const peer = req.socket?.remoteAddress;
    let client = peer ? parseAddr(peer) : undefined;
    if (!client) throw new Error(`peer address ${JSON.stringify(peer)} is not an IP address`);
    if (isTrusted(client)) {
      const xff = req.headers["x-forwarded-for"];
      const hops = (Array.isArray(xff) ? xff.join(",") : (xff ?? "")).split(",");
      for (let i = hops.length - 1; i >= 0; i--) {
        const a = parseAddr((hops[i] ?? "").trim());
        if (!a) break; // a forged or broken entry: keep the last address a trusted hop vouched for
        client = a;
        if (!isTrusted(a)) break;
      }
    }
    return formatKey(client);
  };
}

/**
 * An address as 16 bytes (IPv4 as IPv4-mapped IPv6), a prefix length over those 16 bytes, and
 * whether it is an IPv4 prefix (written as IPv4 or IPv4-mapped). An IPv4 prefix matches IPv4
 * peers only and any other IPv6 prefix IPv6 peers only: "::/0" covers ::ffff:0:0/96 too, but
 * whoever wrote it did not mean to trust every IPv4 peer.
 */
interface Prefix {
  addr: Uint8Array;
  bits: number;
  v4: boolean;
}

function parsePrefix(s: string): Prefix | undefined {
  const slash = s.indexOf("/");
  const addr = parseAddr(slash < 0 ? s : s.slice(0, slash));
  if (!addr) return undefined;
  const dotted = isV4(addr) && !s.includes(":"); // "10.0.0.0/8", not "::ffff:10.0.0.0/104"
  const max = dotted ? 32 : 128;
  let bits = max;
  if (slash >= 0) {
    const t = s.slice(slash + 1);
    if (!/^\d{1,3}$/.test(t) || Number(t) > max) return undefined;
    bits = Number(t);
  }
  return { addr, bits: dotted ? bits + 96 : bits, v4: isV4(addr) };
}

function contains(p: Prefix, a: Uint8Array): boolean {
  if (p.v4 !== isV4(a)) return false;
  for (let bit = 0; bit < p.bits; bit += 8) {
    const i = bit >> 3;
    const n = Math.min(8, p.bits - bit);
    const mask = (0xff << (8 - n)) & 0xff;
    if (((p.addr[i] ?? 0) & mask) !== ((a[i] ?? 0) & mask)) return false;
  }
  return true;
}

const v4Prefix = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

function isV4(a: Uint8Array): boolean {
  return v4Prefix.every((b, i) => a[i] === b);
}

/**
 * Parses an IPv4 or IPv6 address (an IPv6 address's zone is dropped; an IPv4 address has none,
 * as Go's netip reads them); undefined when s is not one.
 */
export function parseAddr(s: string): Uint8Array | undefined {
  const zone = s.indexOf("%");
  if (zone >= 0) {
    s = s.slice(0, zone);
    if (!s.includes(":")) return undefined;
  }
  if (s.startsWith("[") && s.endsWith("]")) s = s.slice(1, -1);
  const out = new Uint8Array(16);
  if (!s.includes(":")) {
    const v4 = parseV4(s);
    if (!v4) return undefined;
    out.set(v4Prefix);
    out.set(v4, 12);
    return out;
  }
  const lastColon = s.lastIndexOf(":");
  if (s.slice(lastColon + 1).includes(".")) {
    // An IPv4 tail ("::ffff:192.0.2.1") is two groups.
    const v4 = parseV4(s.slice(lastColon + 1));
    if (!v4) return undefined;
    s = `${s.slice(0, lastColon + 1)}${((v4[0]! << 8) | v4[1]!).toString(16)}:${((v4[2]! << 8) | v4[3]!).toString(16)}`;
  }
  const halves = s.split("::");
  if (halves.length > 2) return undefined;
  const groups = (h: string | undefined): number[] | undefined => {
    if (!h) return [];
    const ws: number[] = [];
    for (const g of h.split(":")) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      ws.push(parseInt(g, 16));
    }
    return ws;
  };
  const head = groups(halves[0]);
  const tail = groups(halves[1]);
  if (!head || !tail) return undefined;
  let words: number[];
  if (halves.length === 1) {
    if (head.length !== 8) return undefined;
    words = head;
  } else {
    if (head.length + tail.length > 7) return undefined;
    words = [...head, ...new Array<number>(8 - head.length - tail.length).fill(0), ...tail];
  }
  words.forEach((w, i) => {
    out[2 * i] = w >> 8;
    out[2 * i + 1] = w & 0xff;
  });
  return out;
}

function parseV4(s: string): number[] | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  const bytes: number[] = [];
  for (const p of parts) {
    if (!/^(0|[1-9]\d{0,2})$/.test(p) || Number(p) > 255) return undefined;
    bytes.push(Number(p));
  }
  return bytes;
}

/**
 * The key of an address: IPv4 dotted, IPv6 as its /64 prefix in RFC 5952 form ("2001:db8::/64"),
 * as the Go client's middleware writes them, so that both limit one client under one key.
 */
function formatKey(a: Uint8Array): string {
  if (isV4(a)) return Array.from(a.subarray(12)).join(".");
  const words: number[] = [];
  for (let i = 0; i < 16; i += 2) words.push(i < 8 ? ((a[i] ?? 0) << 8) | (a[i + 1] ?? 0) : 0);
  // The longest run of two or more zero groups (the first of equals) becomes "::".
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j === i ? i + 1 : j;
  }
  const hex = (ws: number[]) => ws.map((w) => w.toString(16)).join(":");
  const text = best < 0 ? hex(words) : `${hex(words.slice(0, best))}::${hex(words.slice(best + bestLen))}`;
  return `${text}/64`;
}
