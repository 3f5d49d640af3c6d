/**
 * The TypeScript client of Sluice, a multi-tenant rate-limiting service. It has no runtime
 * dependencies: it calls Sluice's JSON API (/v1) with the global `fetch` (Node 18 or later, or
 * any server-side runtime that has it) and a secret key, which must never reach a browser.
 *
 * Problems Sluice answers with are thrown as {@link SluiceError}. When Sluice cannot answer
 * (a network error, the client's timeout, a 5xx, a gateway's 429 in front of it), the decision
 * calls follow the client's fail policy: `'closed'` (the default) throws, `'open'` returns an
 * allowed result marked `degraded`, and a function decides whatever it likes.
 */


import type { components, paths } from "./openapi.js";

// The wire's types are those of the OpenAPI document (internal/api/openapi.json), generated into
// openapi.ts by openapi-typescript (npm run generate; make lint fails when it is stale). The
// public types below are built from them, so a change of the document that breaks the client
// breaks its type-checking.
type Schemas = components["schemas"];

/** The JSON of a route's 200 answer, as the document describes it. */
type OkJSON<P extends keyof paths, M extends "get" | "put" | "post"> = paths[P][M] extends {
  responses: { 200: { content: { "application/json": infer T } } };
}
  ? T
  : { error: "the document describes no 200 JSON answer for this route" };

/** The JSON body a route takes, as the document describes it. */
type BodyJSON<P extends keyof paths, M extends "put" | "post"> = paths[P][M] extends {
  requestBody?: { content: { "application/json": infer T } };
}
  ? T
  : never;

/** A limit's algorithm. */
export type Kind = Schemas["DefinitionFields"]["kind"];

/**
 * A limit's configuration: the body of PUT /v1/limits/{name} and a decision's inline `config`.
 * Times are milliseconds, as on the wire; members left out take Sluice's defaults.
 */
export type Definition = Schemas["Definition"];

/** A definition as Sluice stores it (createdAt and updatedAt are RFC 3339). */
export type StoredDefinition = Schemas["StoredDefinition"];

/** A decision of limit or check; `throws` turns a refusal into a thrown SluiceError (429, rate_limited). */
export type DecisionRequest = Schemas["DecisionRequest"];

/** What one decision asks. With neither key, session nor ip it is the limit's single global key. */
export type Decision = Omit<DecisionRequest, "throws">;

/** Per-call options of batch and checkBatch. */
export interface BatchOptions extends CallOptions {
  /** Turns a refusal into a thrown SluiceError (429, code rate_limited, with retryAfter). */
  throws?: boolean;
}

/** One decision of a batch or bulk request. */
export type Item = Schemas["BatchItem"];

/** What the client adds to the wire's answers. */
interface Extras {
  /** True when Sluice could not answer and the fail policy made this result. */
  degraded?: boolean;
  /** The RateLimit-Policy header Sluice sent (absent when degraded and on bulk results). */
  rateLimitPolicy?: string;
  /** The RateLimit header Sluice sent. */
  rateLimit?: string;
  /**
   * True when Sluice answered with the stored answer of an earlier request with the same
   * idempotencyKey (the Idempotent-Replayed header): nothing was consumed by this call. On bulk
   * results it is the request's: true when every item decided was replayed.
   */
  replayed?: boolean;
}

/**
 * One decision's answer (the wire's Decision, plus what the client adds). retryAfter (ms) is, on a
 * refusal, when to retry, on a reservation when to run the reserved work, else null; remaining is
 * the balance of the shard(s) the decision used; key is null for the limit's global key.
 */
export type Result = Schemas["Decision"] & Extras;

/** The answer of batch and checkBatch: all of the limits or none. */
export type BatchResult = Omit<Schemas["BatchDecision"], "results"> & Extras & { results: Result[] };

/** One answer of a bulk request: a result, or the error of that item alone. */
export type BulkResult = (Result & { error?: undefined }) | { error: Error };

/** A limit's value now, for one key: the sum over its shards, each shard's, and the config. */
export type Value = Schemas["Value"];

/** One shard's value. */
export type ShardValue = Value["shards"][number];

/** One invalid member of a request. */
export type FieldError = NonNullable<Schemas["Problem"]["errors"]>[number];

/** The stable codes of Sluice's problems ({@link SluiceError.code}). */
export type ProblemCode = Schemas["Problem"]["code"];

/** A webhook endpoint of the tenant (its signing secret only in createWebhook's answer). */
export type WebhookEndpoint = Schemas["WebhookEndpoint"];

/** The events a webhook endpoint may subscribe to. */
export type WebhookEvent = Schemas["WebhookRequest"]["events"][number];

/** One delivery of an endpoint's log. */
export type WebhookDelivery = Schemas["WebhookDelivery"];

/** A captcha challenge (ALTCHA v2 proof of work), as GET /v1/captcha/challenge serves it. */
export type Challenge = Schemas["Challenge"];

/** A session's authorization: POST /v1/sessions/authorize's answer. */
export type Authorization = Schemas["Authorization"];

/** An authorized session: GET /v1/sessions/{sessionId}'s answer. */
export type Session = Schemas["Session"];

/** An override to store: an exact key or a prefix followed by one "*", with numbers or an action. */
export type OverrideRequest = Schemas["OverrideRequest"];

/** An override as Sluice stores it. */
export type Override = Schemas["Override"];

/** One page of a limit's overrides. */
export type OverridesPage = Schemas["OverridesPage"];

/** A problem as it may arrive: every member may be missing from an answer that is not Sluice's. */
type Problem = Partial<Schemas["Problem"]>;

/**
 * A problem (RFC 9457) Sluice answered with. An error answer that is not a problem (a proxy's
 * page) is one too, with its status and an empty code, so that the retry and fail policies treat
 * both alike.
 */
export class SluiceError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** Stable: one of {@link ProblemCode}, or "" when the answer was not a problem. */
  readonly code: ProblemCode | "";
  readonly title: string;
  readonly detail: string;
  /** The request member at fault, when one is. */
  readonly field: string | undefined;
  /** Every invalid member when there is more than one. */
  readonly errors: FieldError[];
  /** On rate_limited problems: the limit's name (`name` is Error's own). */
  readonly limitName: string | undefined;
  /**
   * ms to wait: the problem's retryAfter (rate_limited, tenant_quota_exceeded), else the answer's
   * Retry-After header (Sluice's 503 carries 1 s); null when neither says.
   */
  readonly retryAfter: number | null;
  readonly requestId: string | undefined;
  /**
   * True when Sluice did not answer and the fail policy's refusal was thrown for a call with
   * `throws: true` (its cause is why Sluice did not answer); absent otherwise.
   */
  declare readonly degraded?: true;

  constructor(status: number, p: Problem, route: string) {
    const code = p.code ?? "";
    const detail = p.detail ?? "";
    super(`sluice: ${route}: ${status} ${code}: ${detail}${p.field ? ` (field ${p.field})` : ""}`);
    this.name = "SluiceError";
    this.status = status;
    this.code = code;
    this.title = p.title ?? "";
    this.detail = detail;
    this.field = p.field;
    this.errors = p.errors ?? [];
    this.limitName = p.name;
    this.retryAfter = p.retryAfter ?? null;
    this.requestId = p.requestId;
  }
}

/** What a fallback decides for one decision; the client fills in the rest of the Result. */
export interface FallbackResult {
  ok: boolean;
  retryAfter?: number | null;
  remaining?: number;
}

/**
 * Decides one decision Sluice could not make; error says why. What it returns is marked
 * degraded; what it throws is the call's error (for bulk, that item's).
 */
export type Fallback = (name: string, decision: Decision, error: unknown) => FallbackResult | Promise<FallbackResult>;

/** What decision calls do when Sluice cannot answer. */
export type FailPolicy = "closed" | "open" | Fallback;

/** The options of a {@link Sluice} client. */
export interface SluiceOptions {
  /**
   * E.g. "https://sluice.example.com", or "https://example.com/sluice" for a Sluice a reverse
   * proxy serves under a path prefix (the routes, /v1/…, are appended to it); no query or fragment.
   */
  baseUrl: string;
  secretKey: string;
  /** Bounds each call, its retries included (default 10,000; 0: no bound; at most 2,147,483,647, setTimeout's limit). */
  timeoutMs?: number;
  /** Retries of an idempotent call after a 503 or a network error (a whole number, default 2). */
  retries?: number;
  /** The first delay before a retry (default 50); delays double and are jittered. */
  backoffMs?: number;
  /** The cap of the delays (default 1,000). */
  maxBackoffMs?: number;
  /** Default 'closed'. */
  failPolicy?: FailPolicy;
  /** The fetch the calls go through (default the global fetch). */
  fetch?: typeof fetch;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborting gives up on the call; it is the caller's doing, so no fail policy applies. */
  signal?: AbortSignal;
  /**
   * Bounds this call, its retries included, in place of the client's timeoutMs (0: no bound).
   * Unlike a deadline on signal, which the client cannot see, it also tells a retry whether
   * waiting out a 503's Retry-After leaves time for the retry.
   */
  timeoutMs?: number;
  /**
   * limit, batch, bulk, refund and the hold and lease calls only: sent as the Idempotency-Key header (1 to 255 printable ASCII
   * characters; one per logical request, such as the ID of the order being charged). Sluice stores
   * the first answer in the decision's own transaction and answers a retry with the same key and
   * request within 24 hours with it (`replayed: true`), consuming nothing more; so these calls
   * are then retried like idempotent ones. The same key with another request is a SluiceError
   * 422 idempotency_key_reused.
   */
  idempotencyKey?: string;
}

/** The options of createWebhook. */
export interface CreateWebhookOptions extends CallOptions {
  /** How many refusals of one limit within a minute (UTC) fire limit.refusals (1 to 1,000,000,000; Sluice's default is 100). */
  refusalThreshold?: number;
}

/**
 * Bounds what the client reads of an answer (a bulk answer of 1,000 decisions is about 100 KB);
 * the rest is left unread, so an oversized answer fails to decode rather than filling memory.
 */
const maxResponseBytes = 8 << 20;

/**
 * Sluice gave no answer: a network error (the cause) or the client's timeout (timedOut). The
 * fail policy applies to it, as to a 5xx.
 */
export class NoAnswerError extends Error {
  readonly timedOut: boolean;

  constructor(message: string, cause: unknown, timedOut = false) {
    super(message, { cause });
    this.name = "NoAnswerError";
    this.timedOut = timedOut;
  }
}

interface Answer {
  data: unknown;
  headers: Headers;
}

type WireDecision = Schemas["Decision"];

/**
 * A client of one Sluice server with one secret key. Only idempotent calls are retried (check,
 * checkBatch, value, reset, resetAll and the definition calls); a retried delete (deleteLimit,
 * revokeSession, deleteWebhook, deleteOverride) answered 404 succeeds when an earlier attempt got no answer from
 * Sluice (a network error, a proxy's page), since that attempt may have deleted the thing (so
 * deleting something that never existed can succeed); after Sluice's own 503, which did nothing,
 * the 404 is an error. limit, batch and bulk consume
 * tokens and are not retried unless given an idempotencyKey (CallOptions): when their answer is
 * lost Sluice may have consumed the tokens already, so a plain retry could consume them twice.
 * Their failure goes to the fail policy instead.
 */
export class Sluice {
  readonly #base: string;
  readonly #key: string;
  readonly #timeoutMs: number;
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #maxBackoffMs: number;
  readonly #fallback: Fallback | undefined;
  readonly #fetch: typeof fetch;

  /**
   * Throws a TypeError when baseUrl is not an http or https URL with a host, or when secretKey
   * holds a control character (a trailing newline: refused, not trimmed) or a character beyond
   * U+00FF, which a header cannot carry: a request that cannot be sent must not count as Sluice
   * not answering, which a fail-open client would admit. Also when a number of milliseconds is
   * not one from 0 to 2,147,483,647 or retries is not a whole number from 0: NaN (an unset
   * environment variable through Number) would mean no timeout and endless retries, and a
   * timeout beyond setTimeout's limit would fire at once.
   */
  constructor(o: SluiceOptions) {
    this.#base = checkBaseUrl(o.baseUrl).replace(/\/+$/, "");
    this.#key = checkSecretKey(o.secretKey);
    this.#timeoutMs = checkMs(o.timeoutMs, 10_000, "timeoutMs");
    this.#retries = o.retries ?? 2;
    if (!Number.isSafeInteger(this.#retries) || this.#retries < 0) {
      throw new TypeError(`sluice: retries must be a whole number from 0, not ${String(o.retries)}`);
    }
    this.#backoffMs = checkMs(o.backoffMs, 50, "backoffMs");
    this.#maxBackoffMs = Math.max(checkMs(o.maxBackoffMs, 1_000, "maxBackoffMs"), this.#backoffMs);
    const p = o.failPolicy ?? "closed";
    this.#fallback = p === "closed" ? undefined : p === "open" ? () => ({ ok: true }) : p;
    if (typeof this.#fallback !== "function" && p !== "closed") {
      throw new TypeError(`sluice: unknown fail policy ${String(p)}`);
    }
    this.#fetch = o.fetch ?? ((input, init) => globalThis.fetch(input, init));
  }

  /** Consumes decision.count (default 1) tokens of the limit if it allows it. A refusal is a result with ok false. Retried only with opts.idempotencyKey. */
  limit(name: string, decision: DecisionRequest = {}, opts?: CallOptions): Promise<Result> {
    return this.#decide(name, "/limit", decision, idempotent(opts), opts);
  }

  /** Answers what limit would, consuming nothing. */
  check(name: string, decision: DecisionRequest = {}, opts?: CallOptions): Promise<Result> {
    return this.#decide(name, "/check", decision, true, opts);
  }

  /** Consumes from every limit of items, or from none when one refuses (up to 100 items). Retried only with opts.idempotencyKey. */
  batch(items: Item[], opts?: BatchOptions): Promise<BatchResult> {
    return this.#batch("/v1/limit", items, idempotent(opts), opts);
  }

  /** Answers what batch would, consuming nothing. */
  checkBatch(items: Item[], opts?: BatchOptions): Promise<BatchResult> {
    return this.#batch("/v1/check", items, true, opts);
  }

  /**
   * Makes up to 1,000 independent consuming decisions in one request, answered in the order of
   * items; an invalid item gets its own error and the others are decided. Retried only with opts.idempotencyKey.
   * When the request fails as a whole (no answer, a 5xx), every item follows the fail policy; so
   * does an item Sluice answers with a 5xx problem of its own.
   */
  async bulk(items: Item[], opts?: CallOptions): Promise<BulkResult[]> {
    checkIdempotencyKey(opts, "POST /v1/decisions");
    // An invalid item gets its error here and is not sent; the others are.
    const invalid = items.map((it, i) => invalidItem(it, `decision ${i}`) ?? unencodable(it, `decision ${i}`));
    const sent = items.flatMap((it, i) => (invalid[i] ? [] : [{ it, i }]));
    const merge = (out: BulkResult[]): BulkResult[] => {
      let j = 0;
      return items.map((_, i) => {
        const e = invalid[i];
        return e ? { error: e } : (out[j++] as BulkResult);
      });
    };
    if (sent.length === 0) return merge([]);
    const decisions = sent.map((s) => s.it);
    let a: Answer;
    try {
      a = await this.#call("POST", "/v1/decisions", { decisions } satisfies BodyJSON<"/v1/decisions", "post">, idempotent(opts), opts, true);
    } catch (err) {
      this.#mustFallBack(err, opts);
      return merge(
        await Promise.all(
          decisions.map((it) => this.#fallBack(it, err).then((r): BulkResult => r, (e: unknown): BulkResult => ({ error: asError(e) }))),
        ),
      );
    }
    requireMembers(a.data, "POST /v1/decisions", "the bulk answer", ["results"]);
    const results = (a.data as OkJSON<"/v1/decisions", "post">).results;
    if (!Array.isArray(results)) throw new Error(`sluice: POST /v1/decisions: decode the answer: its "results" is not an array`);
    if (results.length !== decisions.length) {
      throw new Error(`sluice: bulk: ${results.length} results for ${decisions.length} decisions`);
    }
    return merge(
      await Promise.all(
        results.map(async (r, j): Promise<BulkResult> => {
          if (typeof r !== "object" || r === null || !("error" in r)) {
            const decided = result(r, "POST /v1/decisions");
            // Sluice says it of the request as a whole: every item decided was replayed.
            if (a.headers.get("Idempotent-Replayed") === "true") decided.replayed = true;
            return decided;
          }
          // Sluice counts only the items sent: its fields name the caller's index instead.
          const i = sent[j]?.i ?? j;
          // An item's problem carries no requestId: the request's is the one Sluice logs it under.
          const p = reindexed(r.error, j, i);
          const err = new SluiceError(r.error.status ?? 0, { ...p, requestId: p.requestId ?? a.headers.get("X-Request-ID") ?? undefined }, `decision ${i} (${decisions[j]?.name})`);
          // An item Sluice could not decide (a 5xx problem of its own) follows the fail policy, as it would alone.
          if (!this.#fallback || !cannotAnswer(err, opts)) return { error: err };
          return this.#fallBack(decisions[j] as Item, err).then(
            (fell) => fell,
            (e: unknown) => ({ error: asError(e) }),
          );
        }),
      ),
    );
  }

  /** Reads the limit's value now for key (absent: the global key), summed over its shards. */
  async value(name: string, key?: string, opts?: CallOptions): Promise<Value> {
    checkKeyText(key, "value");
    const q = key ? `?${new URLSearchParams({ key })}` : "";
    return (await this.#call("GET", `${limitPath(name)}/value${q}`, undefined, true, opts)).data as OkJSON<"/v1/limits/{name}/value", "get">;
  }

  /** Forgets the state of one key of the limit (absent: the global key). Succeeds whether or not any existed. */
  async reset(name: string, key?: string, opts?: CallOptions): Promise<void> {
    checkKeyText(key, "reset");
    const body: BodyJSON<"/v1/limits/{name}/reset", "post"> = key ? { key } : {};
    await this.#call("POST", `${limitPath(name)}/reset`, body, true, opts);
  }

  /**
   * Gives tokens back to a stored limit ("charge what was used, give back the rest"): count of
   * them to key (absent: the global key) and, through attributes, to the same decision's
   * ancestors; never above a limit's maximum. Without opts.idempotencyKey never retried: when the
   * answer is lost the tokens may already be back. With one it is retried like limit, and a replay
   * of the first refund (`replayed: true`) gives nothing back again.
   */
  async refund(name: string, body: BodyJSON<"/v1/limits/{name}/refund", "post">, opts?: CallOptions): Promise<OkJSON<"/v1/limits/{name}/refund", "post"> & { replayed?: true }> {
    const bad = invalidItem({ name, count: body.count, key: body.key, attributes: body.attributes }, "refund");
    if (bad) throw bad;
    const a = await this.#call("POST", `${limitPath(name)}/refund`, body, idempotent(opts), opts, true);
    requireMembers(a.data, `POST ${limitPath(name)}/refund`, "the refund", ["name", "key", "refunded", "remaining"]);
    const r = a.data as OkJSON<"/v1/limits/{name}/refund", "post"> & { replayed?: true };
    if (a.headers.get("Idempotent-Replayed") === "true") r.replayed = true;
    return r;
  }

  /**
   * Holds amounts of several stored limits all or nothing for body.ttl ms (a refusal is a
   * SluiceError with code "rate_limited", or "tenant_quota_exceeded" when the tenant's plan
   * refused: each limit is one decision of it); settle it with settleHold or give it back with
   * releaseHold before its expiresAt. Retried only with opts.idempotencyKey (a plain retry of a
   * lost answer could hold twice); a replay of the first hold has `replayed: true`.
   * settleHold, releaseHold, releaseLease and extendLease send opts.idempotencyKey likewise.
   */
  async hold(body: BodyJSON<"/v1/holds", "post">, opts?: CallOptions): Promise<Schemas["Hold"] & { replayed?: true }> {
    // Everything else about the items is for Sluice to judge.
    (Array.isArray(body?.limits) ? body.limits : []).forEach((it, i) => {
      if (typeof it === "object" && it !== null && holdsLoneSurrogate(it)) throw loneSurrogate(`hold item ${i} (${it.name})`);
    });
    const a = await this.#call("POST", "/v1/holds", body, idempotent(opts), opts, true);
    requireMembers(a.data, "POST /v1/holds", "the hold", ["holdId", "expiresAt", "results"]);
    const h = a.data as Schemas["Hold"] & { replayed?: true };
    if (!Array.isArray(h.results)) throw new Error(`sluice: POST /v1/holds: decode the answer: its "results" is not an array`);
    h.results.forEach((r) => requireMembers(r, "POST /v1/holds", "a decision", decisionMembers));
    if (a.headers.get("Idempotent-Replayed") === "true") h.replayed = true;
    return h;
  }

  /** Charges a hold's actual amounts (one per limit, in its order) exactly once. Retried only with opts.idempotencyKey. */
  async settleHold(id: string, counts: number[], opts?: CallOptions): Promise<OkJSON<"/v1/holds/{id}/settle", "post">> {
    return (await this.#call("POST", `/v1/holds/${encodeURIComponent(id)}/settle`, { counts } satisfies BodyJSON<"/v1/holds/{id}/settle", "post">, idempotent(opts), opts, true)).data as OkJSON<"/v1/holds/{id}/settle", "post">;
  }

  /** Gives back everything a hold reserved. Retried only with opts.idempotencyKey. */
  async releaseHold(id: string, opts?: CallOptions): Promise<void> {
    await this.#call("DELETE", `/v1/holds/${encodeURIComponent(id)}`, undefined, idempotent(opts), opts, true);
  }

  /** Ends a concurrency lease (a decision's leaseId): its slot is free at once. Retried only with opts.idempotencyKey. */
  async releaseLease(id: string, opts?: CallOptions): Promise<void> {
    await this.#call("POST", `/v1/leases/${encodeURIComponent(id)}/release`, undefined, idempotent(opts), opts, true);
  }

  /** Renews a concurrency lease to its limit's leaseTtl from now. Retried only with opts.idempotencyKey. */
  async extendLease(id: string, opts?: CallOptions): Promise<OkJSON<"/v1/leases/{id}/extend", "post">> {
    return (await this.#call("POST", `/v1/leases/${encodeURIComponent(id)}/extend`, undefined, idempotent(opts), opts, true)).data as OkJSON<"/v1/leases/{id}/extend", "post">;
  }

  /** Forgets the state of every key of the limit. */
  async resetAll(name: string, opts?: CallOptions): Promise<void> {
    await this.#call("POST", `${limitPath(name)}/reset`, { allKeys: true } satisfies BodyJSON<"/v1/limits/{name}/reset", "post">, true, opts);
  }

  /** Creates or replaces the definition of the limit name. */
  async putLimit(name: string, definition: Definition, opts?: CallOptions): Promise<StoredDefinition> {
    const body: BodyJSON<"/v1/limits/{name}", "put"> = definition;
    return (await this.#call("PUT", limitPath(name), body, true, opts)).data as OkJSON<"/v1/limits/{name}", "put">;
  }

  /** Reads the definition of the limit name (a SluiceError with code limit_not_found when none). */
  async getLimit(name: string, opts?: CallOptions): Promise<StoredDefinition> {
    return (await this.#call("GET", limitPath(name), undefined, true, opts)).data as OkJSON<"/v1/limits/{name}", "get">;
  }

  /** Reads every definition of the tenant. */
  async listLimits(opts?: CallOptions): Promise<StoredDefinition[]> {
    return ((await this.#call("GET", "/v1/limits", undefined, true, opts)).data as OkJSON<"/v1/limits", "get">).limits;
  }

  /** Deletes the definition of the limit name and its state. */
  async deleteLimit(name: string, opts?: CallOptions): Promise<void> {
    await this.#call("DELETE", limitPath(name), undefined, true, opts);
  }

  /**
   * Creates or replaces the override of the limit name whose match is override.match: an exact
   * key, or a prefix followed by one "*" ("org:acme:*"). It gives new numbers (rate, capacity,
   * maxReserved) or an action ("allow", "deny"), until expiresAt (absent or null: never). The
   * limit must have a stored definition (a SluiceError with code limit_not_found otherwise).
   */
  async putOverride(name: string, override: OverrideRequest, opts?: CallOptions): Promise<Override> {
    const body: BodyJSON<"/v1/limits/{name}/overrides", "put"> = override;
    if (holdsLoneSurrogate({ key: override?.match })) throw loneSurrogate(`override of ${name}`);
    return (await this.#call("PUT", `${limitPath(name)}/overrides`, body, true, opts)).data as OkJSON<"/v1/limits/{name}/overrides", "put">;
  }

  /**
   * Reads one page of the overrides of the limit name, ordered by match: up to page.limit (the
   * server's default 100, at most 1000) after the match page.after; next is the after of the
   * following page, null on the last.
   */
  async listOverrides(name: string, page?: { limit?: number; after?: string }, opts?: CallOptions): Promise<OverridesPage> {
    const q = new URLSearchParams();
    if (page?.limit !== undefined) q.set("limit", String(page.limit));
    if (page?.after !== undefined && page.after !== "") {
      checkKeyText(page.after, "listOverrides");
      q.set("after", page.after);
    }
    const text = q.toString(); // not q.size: Node 18 before 18.16 has none, and would drop the query
    const qs = text ? `?${text}` : "";
    return (await this.#call("GET", `${limitPath(name)}/overrides${qs}`, undefined, true, opts)).data as OkJSON<"/v1/limits/{name}/overrides", "get">;
  }

  /** Deletes the override of the limit name whose match is match (a SluiceError with code not_found when none). */
  async deleteOverride(name: string, match: string, opts?: CallOptions): Promise<void> {
    checkKeyText(match, "deleteOverride");
    await this.#call("DELETE", `${limitPath(name)}/overrides?${new URLSearchParams({ match })}`, undefined, true, opts);
  }

  /**
   * Authorizes the anonymous session sessionId with the payload its page solved (see the
   * captcha helper, `@sluice/client/captcha`): Sluice verifies the proof of work and answers with
   * the authorization and its token. A challenge authorizes once, so this call is never retried.
   */
  async authorizeSession(sessionId: string, payload: string, opts?: CallOptions): Promise<Authorization> {
    const body: BodyJSON<"/v1/sessions/authorize", "post"> = { sessionId, payload };
    return (await this.#call("POST", "/v1/sessions/authorize", body, false, opts)).data as OkJSON<"/v1/sessions/authorize", "post">;
  }

  /** Reads the session's active authorization (a SluiceError with code not_found when none). */
  async getSession(sessionId: string, opts?: CallOptions): Promise<Session> {
    return (await this.#call("GET", sessionPath(sessionId), undefined, true, opts)).data as OkJSON<"/v1/sessions/{sessionId}", "get">;
  }

  /** Ends the session's authorization (a SluiceError with code not_found when there was none). */
  async revokeSession(sessionId: string, opts?: CallOptions): Promise<void> {
    await this.#call("DELETE", sessionPath(sessionId), undefined, true, opts);
  }

  /**
   * Adds a webhook endpoint that receives the events (key.created, key.revoked,
   * definition.changed, tenant.quota_near, limit.refusals, key.near_limit) of the tenant, and returns it with its signing secret ("whsec_…"), which
   * Sluice shows this once. Never retried.
   */
  async createWebhook(url: string, events: WebhookEvent[], opts?: CreateWebhookOptions): Promise<WebhookEndpoint & { secret: string }> {
    const body: BodyJSON<"/v1/webhooks", "post"> = opts?.refusalThreshold === undefined ? { url, events } : { url, events, refusalThreshold: opts.refusalThreshold };
    return (await this.#call("POST", "/v1/webhooks", body, false, opts)).data as WebhookEndpoint & { secret: string };
  }

  /** Lists the tenant's webhook endpoints, oldest first. */
  async listWebhooks(opts?: CallOptions): Promise<WebhookEndpoint[]> {
    return ((await this.#call("GET", "/v1/webhooks", undefined, true, opts)).data as OkJSON<"/v1/webhooks", "get">).webhooks;
  }

  /** Removes a webhook endpoint and its delivery log. */
  async deleteWebhook(id: number, opts?: CallOptions): Promise<void> {
    await this.#call("DELETE", webhookPath(id, ""), undefined, true, opts);
  }

  /**
   * Queues a webhook.test event to one endpoint. Never retried. The server takes at most 10 test
   * events and resends a minute per endpoint (429 beyond that, with its retryAfter) and none while
   * the endpoint has 1,000 deliveries waiting (409).
   */
  async sendTestWebhook(id: number, opts?: CallOptions): Promise<void> {
    await this.#call("POST", webhookPath(id, "/test"), undefined, false, opts);
  }

  /** An endpoint's most recent deliveries (limit 1–500, default 50), newest first. */
  async webhookDeliveries(id: number, limit?: number, opts?: CallOptions): Promise<WebhookDelivery[]> {
    const q = limit === undefined ? "" : `?${new URLSearchParams({ limit: String(limit) })}`;
    return ((await this.#call("GET", webhookPath(id, `/deliveries${q}`), undefined, true, opts)).data as OkJSON<"/v1/webhooks/{id}/deliveries", "get">)
      .deliveries;
  }

  /** Makes a delivery due again (the same webhook-id, so receivers can deduplicate). Never retried; bounded as sendTestWebhook is. */
  async resendWebhookDelivery(id: number, deliveryId: string, opts?: CallOptions): Promise<void> {
    await this.#call("POST", webhookPath(id, `/deliveries/${encodeURIComponent(deliveryId)}/resend`), undefined, false, opts);
  }

  async #decide(name: string, verb: string, d: DecisionRequest, retry: boolean, opts?: CallOptions): Promise<Result> {
    const bad = invalidItem({ ...d, name }, verb.slice(1));
    if (bad) throw bad;
    if (verb === "/limit") checkIdempotencyKey(opts, `POST ${limitPath(name)}${verb}`);
    let a: Answer;
    try {
      const body: BodyJSON<"/v1/limits/{name}/limit" | "/v1/limits/{name}/check", "post"> = d;
      a = await this.#call("POST", limitPath(name) + verb, body, retry, opts, verb === "/limit");
    } catch (err) {
      this.#mustFallBack(err, opts);
      const { throws, ...decision } = d;
      const r = await this.#fallBack({ ...decision, name }, err);
      // throws: true asks for a refusal thrown, whoever refused: the fallback's too.
      if (throws && !r.ok) throw degradedRefusal(r, `POST ${limitPath(name)}${verb}`, err);
      return r;
    }
    return withHeaders(result(a.data as OkJSON<"/v1/limits/{name}/limit" | "/v1/limits/{name}/check", "post">, `POST ${limitPath(name)}${verb}`), a.headers);
  }

  async #batch(path: string, items: Item[], retry: boolean, opts?: BatchOptions): Promise<BatchResult> {
    if (!Array.isArray(items)) throw new TypeError(`sluice: ${path.slice(4)}: items must be an array`);
    for (const [i, it] of items.entries()) {
      const bad = invalidItem(it, `${path.slice(4)} item ${i}`);
      if (bad) throw bad;
    }
    if (path === "/v1/limit") checkIdempotencyKey(opts, `POST ${path}`);
    let a: Answer;
    try {
      const body: BodyJSON<"/v1/limit" | "/v1/check", "post"> = opts?.throws ? { limits: items, throws: true } : { limits: items };
      a = await this.#call("POST", path, body, retry, opts, path === "/v1/limit");
    } catch (err) {
      this.#mustFallBack(err, opts);
      const results = await Promise.all(items.map((it) => this.#fallBack(it, err)));
      const ok = results.every((r) => r.ok);
      // A refused batch waits for its refusals, an admitted one for its reservations.
      const waits = results.filter((r) => r.ok === ok && r.retryAfter !== null).map((r) => r.retryAfter as number);
      if (opts?.throws && !ok) {
        // As Sluice's own: the refusal of the longest wait (the first of equals) is thrown.
        const worst = results.reduce((w, r) => (!r.ok && (w.ok || (r.retryAfter ?? -1) > (w.retryAfter ?? -1)) ? r : w));
        throw degradedRefusal(worst, `POST ${path}`, err);
      }
      return { ok, retryAfter: waits.length ? Math.max(...waits) : null, results, degraded: true };
    }
    requireMembers(a.data, `POST ${path}`, "the batch decision", ["ok", "retryAfter", "results"]);
    const w = a.data as OkJSON<"/v1/limit" | "/v1/check", "post">;
    if (!Array.isArray(w.results)) throw new Error(`sluice: POST ${path}: decode the answer: its "results" is not an array`);
    return withHeaders<BatchResult>({ ok: w.ok, retryAfter: w.retryAfter ?? null, results: w.results.map((r) => result(r, `POST ${path}`)) }, a.headers);
  }

  /** Rethrows err unless the fail policy applies to it: a fallback exists and Sluice did not answer. */
  #mustFallBack(err: unknown, opts?: CallOptions): void {
    if (!this.#fallback || !cannotAnswer(err, opts)) throw err;
  }

  async #fallBack(it: Item, err: unknown): Promise<Result> {
    const { name, ...d } = it;
    const r = await (this.#fallback as Fallback)(name, d, err);
    return { ok: r.ok, retryAfter: r.retryAfter ?? null, remaining: r.remaining ?? 0, name, key: d.key ?? null, degraded: true };
  }

  /**
   * Makes one call: sends body as JSON, retries when retry allows it, and resolves to a 2xx
   * answer's JSON or throws a SluiceError (a problem), a NoAnswerError or the caller's abort reason.
   */
  async #call(method: string, path: string, body: unknown, retry: boolean, opts?: CallOptions, keyed = false): Promise<Answer> {
    const route = `${method} ${path.split("?")[0]}`;
    const idemKey = keyed ? checkIdempotencyKey(opts, route) : undefined;
    // A body JSON cannot carry (a BigInt, a cycle) throws here, before anything is sent.
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const timeoutMs = opts?.timeoutMs === undefined ? this.#timeoutMs : checkMs(opts.timeoutMs, 0, `${route}: timeoutMs`);
    // One signal for the whole call (its retries included), aborted by the timeout or the
    // caller. Linked by hand rather than with AbortSignal.any, which Node 20.0-20.2 lack (and
    // runtimes other than Node may).
    const ctl = new AbortController();
    const deadline = timeoutMs > 0 ? Date.now() + timeoutMs : Infinity;
    let timedOut = false;
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            ctl.abort();
          }, timeoutMs)
        : undefined;
    const caller = opts?.signal;
    const onCallerAbort = () => ctl.abort(caller?.reason);
    caller?.addEventListener("abort", onCallerAbort, { once: true });
    try {
      if (caller?.aborted) throw caller.reason;
      let mayHaveActed = false; // an earlier attempt got no answer from Sluice, so may have been carried out
      for (let attempt = 0; ; attempt++) {
        try {
          return await this.#once(method, this.#base + path, route, payload, ctl.signal, idemKey);
        } catch (err) {
          if (caller?.aborted) throw caller.reason;
          if (mayHaveActed && method === "DELETE" && idemKey === undefined && notFound(err)) {
            // The attempt whose answer was lost may have deleted it: what the caller wanted.
            // Sluice's own 503 problem means it did nothing: a 404 after it is an error.
            return { data: undefined, headers: new Headers() };
          }
          mayHaveActed ||= !sluiceAnswered(err);
          if (timedOut) throw new NoAnswerError(`sluice: ${route}: no answer in ${timeoutMs} ms`, err, true);
          if (!retry || attempt >= this.#retries || !retryable(err)) throw err;
          await sleep(this.#retryDelay(attempt, err, deadline - Date.now()), ctl.signal).catch(() => {
            if (caller?.aborted) throw caller.reason;
            throw new NoAnswerError(`sluice: ${route}: no answer in ${timeoutMs} ms (while waiting to retry after: ${(err as Error).message})`, err, true);
          });
        }
      }
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener("abort", onCallerAbort);
    }
  }

  async #once(method: string, url: string, route: string, payload: string | undefined, signal: AbortSignal, idemKey?: string): Promise<Answer> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#key}`,
      Accept: "application/json, application/problem+json",
    };
    if (payload !== undefined) headers["Content-Type"] = "application/json";
    if (idemKey !== undefined) headers["Idempotency-Key"] = idemKey;
    let resp: Response;
    let text: string;
    try {
      resp = await this.#fetch(url, { method, headers, body: payload ?? null, signal });
      text = await readBounded(resp);
    } catch (err) {
      throw new NoAnswerError(`sluice: ${route}: ${(err as Error)?.message ?? String(err)}`, err);
    }
    if (resp.status >= 300) throw problem(resp, text, route);
    // 204 and 202 (a webhook test or resend queued) have no body; any other 2xx has JSON, and an
    // empty one does not decode, as garbage does.
    if (resp.status === 204 || (resp.status === 202 && text === "")) return { data: undefined, headers: resp.headers };
    if (text === "") {
      throw new Error(`sluice: ${route}: decode the answer (${resp.status}, ${resp.headers.get("Content-Type")}): the body is empty`);
    }
    try {
      return { data: JSON.parse(text), headers: resp.headers };
    } catch (err) {
      throw new Error(`sluice: ${route}: decode the answer (${resp.status}, ${resp.headers.get("Content-Type")}): ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * How long to wait before retry number attempt+1 after err: the jittered backoff, or, when the
   * answer asked for longer with Retry-After (Sluice's 503 asks for 1 s), that long, up to
   * maxBackoffMs, so that a proxy asking for minutes cannot stall a call. That wait is taken
   * only when it leaves the call at least as long again for the retry before its timeout (leftMs
   * away): otherwise the backoff's retry may still be answered in time, where waiting out the
   * Retry-After would most likely fail the call. (A deadline on the caller's signal is not known
   * here: only the call's timeoutMs counts.)
   */
  #retryDelay(attempt: number, err: unknown, leftMs: number): number {
    const d = this.#delay(attempt);
    const retryAfter = err instanceof SluiceError ? (err.retryAfter ?? 0) : 0;
    if (retryAfter <= d) return d;
    const asked = Math.max(d, Math.min(retryAfter, this.#maxBackoffMs));
    return 2 * asked <= leftMs ? asked : d;
  }

  /** The jittered exponential backoff before retry number attempt+1: uniform in [d/2, d]. */
  #delay(attempt: number): number {
    const d = Math.min(this.#backoffMs * 2 ** attempt, this.#maxBackoffMs);
    return d / 2 + Math.random() * (d / 2);
  }
}

/** Reads up to maxResponseBytes of the answer's body. */
async function readBounded(resp: Response): Promise<string> {
  if (!resp.body) return "";
  const reader = resp.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const room = maxResponseBytes - size;
    chunks.push(value.byteLength > room ? value.subarray(0, room) : value);
    size += Math.min(value.byteLength, room);
    if (size >= maxResponseBytes) {
      await reader.cancel();
      break;
    }
  }
  const all = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return new TextDecoder().decode(all);
}

/**
 * Whether Sluice can know a limit by that name: 1 to 128 characters of A-Z a-z 0-9 _ . : -, and
 * not "." or "..", which fetch would resolve as a URL path's dot segments (even written %2E).
 */
function validName(name: unknown): boolean {
  return typeof name === "string" && /^[A-Za-z0-9_.:-]{1,128}$/.test(name) && name !== "." && name !== "..";
}

function limitPath(name: string): string {
  if (!validName(name)) throw invalidName(name, "limit");
  return `/v1/limits/${encodeURIComponent(name)}`;
}

function invalidName(name: unknown, what: string): TypeError {
  return new TypeError(`sluice: ${what}: the name ${JSON.stringify(name)} is not 1 to 128 characters of A-Z a-z 0-9 _ . : - (nor "." or "..")`);
}

/**
 * Whether s holds a lone surrogate, which JSON carries as an escape that Sluice reads as U+FFFD:
 * keys differing only there would silently share one bucket.
 */
function hasLoneSurrogate(s: string): boolean {
  return /\p{Cs}/u.test(s);
}

/**
 * The error of a decision the client refuses to send (what: where it is, for the message):
 * Sluice could not know its name, or its count is not a number of tokens. Everything else is
 * for Sluice to judge.
 */
function invalidItem(it: Item, what: string): TypeError | undefined {
  if (typeof it !== "object" || it === null) return new TypeError(`sluice: ${what}: a decision must be an object`);
  if (!validName(it.name)) return invalidName(it.name, what);
  const n: unknown = it.count;
  if (n !== undefined && (typeof n !== "number" || !Number.isFinite(n) || n < 0)) {
    return new TypeError(`sluice: ${what} (${it.name}): count must be a finite number of tokens, 0 or more, not ${String(n)}`);
  }
  if (holdsLoneSurrogate(it)) return loneSurrogate(`${what} (${it.name})`);
  return undefined;
}

/**
 * A TypeError when JSON cannot carry the item (a BigInt, a cycle, a number that is not finite,
 * which JSON.stringify would send as null and Sluice refuse with the whole request), so that in
 * bulk it is that item's own error.
 */
function unencodable(it: Item, what: string): TypeError | undefined {
  try {
    JSON.stringify(it, (field: string, v: unknown) => {
      if (typeof v === "number" && !Number.isFinite(v)) throw new TypeError(`${field || "a number"} is ${v}`);
      return v;
    });
    return undefined;
  } catch (e) {
    return new TypeError(`sluice: ${what} (${it.name}): JSON cannot carry it: ${asError(e).message}`);
  }
}

/** Whether a decision's key, session or attributes (names or values) hold a lone surrogate. */
function holdsLoneSurrogate(it: { key?: unknown; session?: unknown; attributes?: Record<string, unknown> | undefined }): boolean {
  const texts = [it.key, it.session, ...Object.entries(it.attributes ?? {}).flat()];
  return texts.some((t) => typeof t === "string" && hasLoneSurrogate(t));
}

function loneSurrogate(what: string): TypeError {
  return new TypeError(`sluice: ${what}: a key, session or attribute holds a lone surrogate (not text Sluice can store)`);
}

/**
 * Throws on a key with a lone surrogate (what: the call): sent in JSON or a query, Sluice would
 * read it as U+FFFD and act on another key ("a\ud800" reset as "a\ufffd").
 */
function checkKeyText(key: string | undefined, what: string): void {
  if (typeof key === "string" && hasLoneSurrogate(key)) throw loneSurrogate(what);
}

function webhookPath(id: number, rest: string): string {
  if (!Number.isSafeInteger(id) || id <= 0) {
    throw new TypeError(`sluice: a webhook endpoint's id is a positive whole number, not ${String(id)}`);
  }
  return `/v1/webhooks/${id}${rest}`;
}

/**
 * Headers as a receiver has them: a fetch Headers, or a plain object such as Node's
 * IncomingHttpHeaders (whose names are lower case) or one a framework built ({"Webhook-Id": …}):
 * names are looked up whatever their case.
 */
export type HeadersLike = Headers | Record<string, string | string[] | undefined>;

/** The value of the header name (lower case) in h, "" when absent; a plain object's names in any case. */
function headerOf(h: HeadersLike, name: string): string {
  if (typeof (h as Headers).get === "function") return (h as Headers).get(name) ?? "";
  const o = h as Record<string, string | string[] | undefined>;
  let v = o[name];
  if (v === undefined) {
    const k = Object.keys(o).find((k) => k.toLowerCase() === name);
    if (k !== undefined) v = o[k];
  }
  return Array.isArray(v) ? (v[0] ?? "") : (v ?? "");
}

/** verifyWebhook's default tolerance: 5 minutes. */
const webhookToleranceMs = 5 * 60_000;

/**
 * Verifies a webhook delivery as its receiver got it, by the Standard Webhooks convention: the
 * webhook-signature header holds "v1," + base64(HMAC-SHA256(key, id + "." + timestamp + "." +
 * body)), key being the bytes of the secret after "whsec_", and the webhook-timestamp (Unix
 * seconds) must be within toleranceMs of now (default 5 minutes, also taken for a toleranceMs
 * that is not a finite number above 0, as Go's VerifyWebhook takes it for 0 or less: a NaN from
 * an unset setting must not switch the check off), which stops replays. Pass the
 * raw body, before any JSON parsing. Deduplicate on the webhook-id header: delivery is at least
 * once. Uses Web Crypto (Node 18+, browsers, edge runtimes).
 */
export async function verifyWebhook(secret: string, headers: HeadersLike, body: string | Uint8Array, toleranceMs = webhookToleranceMs): Promise<boolean> {
  const id = headerOf(headers, "webhook-id");
  const ts = headerOf(headers, "webhook-timestamp");
  const seconds = Number(ts);
  if (!Number.isFinite(toleranceMs) || toleranceMs <= 0) toleranceMs = webhookToleranceMs;
  if (!id || !/^[0-9]+$/.test(ts) || Math.abs(Date.now() - seconds * 1000) > toleranceMs) return false;
  let key: Uint8Array<ArrayBuffer>;
  try {
    key = Uint8Array.from(atob(secret.replace(/^whsec_/, "")), (c) => c.charCodeAt(0));
  } catch {
    return false;
  }
  if (key.length === 0) return false; // no secret (an unset variable): nothing can be signed with it
  const enc = new TextEncoder();
  const raw = typeof body === "string" ? enc.encode(body) : body;
  const prefix = enc.encode(`${id}.${ts}.`);
  const signed = new Uint8Array(prefix.length + raw.length);
  signed.set(prefix);
  signed.set(raw, prefix.length);
  const subtle = (globalThis.crypto ?? (await nodeWebCrypto())).subtle;
  const k = await subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const mac = new Uint8Array(await subtle.sign("HMAC", k, signed));
  const want = `v1,${btoa(String.fromCharCode(...mac))}`;
  // Compared in full whatever the input, so the time taken says nothing about the signature.
  return headerOf(headers, "webhook-signature")
    .split(" ")
    .map((sig) => {
      let diff = sig.length ^ want.length;
      for (let i = 0; i < want.length; i++) diff |= (sig.charCodeAt(i) || 0) ^ want.charCodeAt(i);
      return diff === 0;
    })
    .some(Boolean);
}

/** Node 18's Web Crypto, which is not a global there (it is from Node 19, and in browsers). */
async function nodeWebCrypto(): Promise<Crypto> {
  const name = "node:crypto"; // a variable: bundlers for the browser must not resolve it
  return ((await import(name)) as { webcrypto: Crypto }).webcrypto;
}

function sessionPath(id: string): string {
  return `/v1/sessions/${encodeURIComponent(id)}`;
}

/** The members the OpenAPI document requires of a decision. */
const decisionMembers = ["ok", "retryAfter", "remaining", "name", "key"] as const;

/**
 * Throws the error of an answer that does not decode (route: the call's; what: the part of the
 * answer) unless w is an object with every member of names, its ok (if named) a boolean: read as
 * is, an answer of {} or null would be a refusal nobody made.
 */
function requireMembers(w: unknown, route: string, what: string, names: readonly string[]): void {
  if (typeof w !== "object" || w === null || Array.isArray(w)) {
    throw new Error(`sluice: ${route}: decode the answer: ${what} is ${JSON.stringify(w) ?? "missing"}, not an object`);
  }
  for (const n of names) {
    if (!(n in w)) throw new Error(`sluice: ${route}: decode the answer: ${what} has no "${n}" member`);
  }
  if (names.includes("ok") && typeof (w as { ok?: unknown }).ok !== "boolean") {
    throw new Error(`sluice: ${route}: decode the answer: ${what}'s "ok" is not a boolean`);
  }
}

/** A decision of Sluice's answer (route: the call's) as a Result; one that does not decode throws. */
function result(w: WireDecision, route: string): Result {
  requireMembers(w, route, "a decision", decisionMembers);
  const r: Result = { ok: w.ok, retryAfter: w.retryAfter ?? null, remaining: w.remaining, name: w.name, key: w.key ?? null };
  if (w.shadow) r.shadow = { ok: w.shadow.ok, retryAfter: w.shadow.retryAfter ?? null };
  if (w.parents !== undefined) r.parents = w.parents;
  if (w.override !== undefined) r.override = w.override;
  if (w.leaseId !== undefined) {
    r.leaseId = w.leaseId;
    r.expiresAt = w.expiresAt;
  }
  return r;
}

/**
 * A bulk item's problem with the "decisions[j]." prefix of its field and of its errors' fields
 * (j: its index among the items sent) naming the caller's index i instead.
 */
function reindexed(p: Problem, j: number, i: number): Problem {
  if (i === j) return p;
  const from = `decisions[${j}].`;
  const swap = (field: string) => (field.startsWith(from) ? `decisions[${i}].${field.slice(from.length)}` : field);
  const out: Problem = { ...p };
  if (typeof p.field === "string") out.field = swap(p.field);
  if (Array.isArray(p.errors)) out.errors = p.errors.map((e) => (typeof e?.field === "string" ? { ...e, field: swap(e.field) } : e));
  return out;
}

/**
 * The SluiceError a refusal of the fail policy is thrown as for `throws: true` (route: the call):
 * the 429 rate_limited problem Sluice answers a refusal with, marked degraded, caused by err
 * (why Sluice did not answer).
 */
function degradedRefusal(r: Result, route: string, err: unknown): SluiceError {
  const p: Problem = {
    type: "about:blank",
    title: "Rate limited",
    status: 429,
    code: "rate_limited",
    detail: `limit ${JSON.stringify(r.name)} refused the request (the fail policy decided: Sluice did not answer)`,
    name: r.name,
    ...(r.retryAfter === null ? {} : { retryAfter: r.retryAfter }),
  };
  const e = new SluiceError(429, p, route);
  Object.defineProperty(e, "degraded", { value: true, enumerable: true });
  e.cause = err;
  return e;
}

function withHeaders<T extends { rateLimitPolicy?: string; rateLimit?: string; replayed?: boolean }>(r: T, h: Headers): T {
  const policy = h.get("RateLimit-Policy");
  const limit = h.get("RateLimit");
  if (policy !== null) r.rateLimitPolicy = policy;
  if (limit !== null) r.rateLimit = limit;
  if (h.get("Idempotent-Replayed") === "true") r.replayed = true;
  return r;
}

/** Whether a consuming call may be retried: only with an idempotencyKey (Sluice replays). */
function idempotent(opts?: CallOptions): boolean {
  return opts?.idempotencyKey !== undefined;
}

function problem(resp: Response, text: string, route: string): SluiceError {
  const ct = (resp.headers.get("Content-Type") ?? "").split(";")[0]?.trim().toLowerCase();
  let p: Problem | undefined;
  if (ct === "application/problem+json") {
    try {
      p = JSON.parse(text) as Problem;
    } catch {
      p = undefined;
    }
  }
  if (!p || typeof p !== "object" || !p.code) {
    p = { title: resp.statusText, detail: `the answer is not a problem: ${text.slice(0, 200).trim()}` };
  }
  if (p.retryAfter === undefined || p.retryAfter === null) {
    const asked = retryAfterHeader(resp.headers.get("Retry-After"), Date.now());
    if (asked !== null) p = { ...p, retryAfter: asked };
  }
  return new SluiceError(resp.status, p, route);
}

/**
 * A Retry-After header in ms: delay-seconds or an HTTP date (RFC 9110, 10.2.3); null when it is
 * absent, malformed or in the past.
 */
function retryAfterHeader(v: string | null, now: number): number | null {
  if (v === null || v === "") return null;
  if (/^[0-9]+$/.test(v)) {
    const s = Number(v);
    return s > 0 ? s * 1000 : null;
  }
  const at = Date.parse(v);
  return Number.isFinite(at) && at > now ? at - now : null;
}

/** Whether err is Sluice's answer that the thing named does not exist. */
function notFound(err: unknown): boolean {
  return err instanceof SluiceError && err.status === 404 && (err.code === "limit_not_found" || err.code === "not_found");
}

/** Whether err is Sluice's own problem: not a network error, nor a proxy's error page (which it may send after forwarding the request). */
function sluiceAnswered(err: unknown): boolean {
  return err instanceof SluiceError && err.code !== "";
}

/** Whether a failed attempt may succeed when repeated: Sluice failed closed (503) or did not answer. */
function retryable(err: unknown): boolean {
  if (err instanceof SluiceError) return err.status === 503;
  return err instanceof NoAnswerError;
}

/**
 * Whether err means Sluice did not answer (rather than answered no): a NoAnswerError (a network
 * error, the client's timeout), a 5xx, or a 429 that is not Sluice's problem (gatewayRefused). Nothing else is: not an error thrown before the request
 * was sent (the caller's arguments, a body JSON cannot carry), nor an answer that did not decode.
 */
function cannotAnswer(err: unknown, opts?: CallOptions): boolean {
  if (opts?.signal?.aborted) return false; // the caller gave up: its error, not Sluice's
  if (err instanceof SluiceError) return err.status >= 500 || gatewayRefused(err);
  return err instanceof NoAnswerError;
}

/**
 * Whether err is a 429 that is not Sluice's problem (Sluice's own 429s are problems with a code):
 * something in front of Sluice (a gateway, a load balancer) limiting this client, so that Sluice
 * was never asked. The fail policy applies to it, as to a 5xx.
 */
function gatewayRefused(err: unknown): boolean {
  return err instanceof SluiceError && err.status === 429 && err.code === "";
}

/**
 * The call's idempotencyKey (route: the call, for the message), checked: 1 to 255 printable
 * ASCII characters, else a TypeError before anything is sent.
 */
function checkIdempotencyKey(opts: CallOptions | undefined, route: string): string | undefined {
  const k: unknown = opts?.idempotencyKey;
  if (k !== undefined && (typeof k !== "string" || !/^[\x20-\x7e]{1,255}$/.test(k))) {
    throw new TypeError(`sluice: ${route}: an idempotencyKey is 1 to 255 printable ASCII characters`);
  }
  return k;
}

/**
 * A number of milliseconds from the options (what: its name, for the message), or def when
 * absent: a number from 0 to setTimeout's limit, else a TypeError before anything is sent.
 */
function checkMs(ms: unknown, def: number, what: string): number {
  if (ms === undefined) return def;
  if (typeof ms !== "number" || !(ms >= 0 && ms <= maxTimerMs)) {
    throw new TypeError(`sluice: ${what} must be a number of milliseconds from 0 to ${maxTimerMs}, not ${String(ms)}`);
  }
  return ms;
}

/** setTimeout's longest delay: a longer one fires at once. */
const maxTimerMs = 2 ** 31 - 1;

/** baseUrl, checked: an http or https URL with a host. */
function checkBaseUrl(baseUrl: unknown): string {
  let u: URL | undefined;
  try {
    u = typeof baseUrl === "string" ? new URL(baseUrl) : undefined;
  } catch {
    u = undefined;
  }
  if (!u || (u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
    throw new TypeError(`sluice: baseUrl ${JSON.stringify(baseUrl)} is not an http or https URL with a host (e.g. "https://sluice.example.com")`);
  }
  // fetch refuses these itself, before connecting: they would read as Sluice not answering.
  // The routes are appended to baseUrl: after a query or a fragment they would be part of it,
  // never of the path. A path prefix (a Sluice served by a reverse proxy under /sluice/) is kept.
  if ((baseUrl as string).includes("?") || (baseUrl as string).includes("#")) {
    throw new TypeError(`sluice: baseUrl ${JSON.stringify(baseUrl)} must have no query or fragment (a path prefix, such as "https://example.com/sluice", is fine)`);
  }
  if (u.username !== "" || u.password !== "") {
    throw new TypeError("sluice: baseUrl must not carry credentials (user:password@): the secret key authenticates");
  }
  if (u.port !== "" && fetchBadPorts.has(Number(u.port))) {
    throw new TypeError(`sluice: baseUrl port ${u.port} is one fetch refuses to connect to (the Fetch standard's bad ports)`);
  }
  return baseUrl as string;
}

/** The ports fetch refuses to connect to (the Fetch standard's "bad port" list). */
const fetchBadPorts = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113,
  115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556,
  563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667,
  6668, 6669, 6679, 6697, 10080,
]);

/** secretKey, checked: no control character and nothing beyond U+00FF, which a header cannot carry. */
function checkSecretKey(key: unknown): string {
  if (typeof key !== "string" || /[\x00-\x1f\x7f]|[^\x00-\xff]/.test(key)) {
    throw new TypeError("sluice: secretKey must be a string without control characters (a trailing newline, say) or characters beyond U+00FF");
  }
  return key;
}

function asError(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
