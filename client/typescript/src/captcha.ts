/**
 * The browser's side of Sluice's captcha: an ES module with no dependencies that needs only
 * `fetch` and Web Crypto (every current browser; Node 20 too). It
 *
 * 1. makes a session ID (or takes the page's own),
 * 2. fetches a challenge from Sluice with the tenant's **publishable** key
 *    (GET /v1/captcha/challenge?pk=…&sid=…; the page's origin must be among the tenant's allowed
 *    origins),
 * 3. solves its proof of work (ALTCHA v2, SHA-256: the counter whose derived key starts with the
 *    challenge's keyPrefix),
 * 4. submits `{sessionId, payload}` to the tenant's **own backend**, which authorizes the session
 *    with its secret key (`Sluice.authorizeSession`, POST /v1/sessions/authorize) and answers
 *    what it likes, typically the authorization,
 *
 * and returns the session ID with that answer. From then on the backend's decisions may use
 * `{ session: sessionId }` instead of a key. The secret key never reaches the browser.
 *
 * It is the same protocol the vendored ALTCHA widget speaks, without the widget: for pages that
 * want no visible captcha, or their own.
 */
import type { components } from "./openapi.js";

/** A challenge as GET /v1/captcha/challenge serves it. */
export type Challenge = components["schemas"]["Challenge"];

/** The solution of a challenge. */
export interface Solution {
  counter: number;
  /** Hex of the whole derived key (SHA-256). */
  derivedKey: string;
  /** Milliseconds the solving took (informational). */
  time: number;
}

/** What the tenant's backend receives from {@link solveCaptcha}: the body of POST /v1/sessions/authorize. */
export interface Submission {
  sessionId: string;
  /** The solved payload (standard base64 of JSON), as the widget's "altcha" form field holds it. */
  payload: string;
}

/** The options of {@link solveCaptcha}. */
export interface SolveOptions<T> {
  /** Sluice's URL, e.g. "https://sluice.example.com". */
  baseUrl: string;
  /** The tenant's publishable key (pk_live_…); never a secret key. */
  publishableKey: string;
  /**
   * Where the solved payload goes: the URL of the tenant's backend endpoint (POSTed as JSON, with
   * the page's cookies when same-origin; its JSON answer is returned), or a function that sends it.
   */
  submit: string | ((s: Submission) => Promise<T>);
  /** The page's session ID (default: a new one from {@link newSessionId}). */
  sessionId?: string;
  /** Gives up on the whole flow. */
  signal?: AbortSignal;
  /** The fetch the requests go through (default the global fetch). */
  fetch?: typeof fetch;
}

/** What {@link solveCaptcha} returns: the session and what the tenant's backend answered. */
export interface SolvedSession<T> {
  sessionId: string;
  /** What the backend answered (for the default submit, its JSON). */
  authorization: T;
}

/** Sluice (or the tenant's backend) refused a step, with the status and the problem's code and detail. */
export class CaptchaError extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;

  constructor(step: string, status: number, code: string, detail: string) {
    super(`sluice captcha: ${step}: ${status}${code ? ` ${code}` : ""}: ${detail}`);
    this.name = "CaptchaError";
    this.status = status;
    this.code = code;
    this.detail = detail;
  }
}

const sessionIdPattern = /^[A-Za-z0-9_-]{16,128}$/;
const hex32 = /^[0-9a-f]{32}$/;

/** A new session ID: 128 random bits, base64url (22 characters). */
export function newSessionId(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...b))
    .replaceAll("+", "-")
    .replaceAll("/", "_")
    .replace(/=+$/, "");
}

/** Fetches, solves and submits a challenge; see the module's documentation. */
export async function solveCaptcha<T = unknown>(o: SolveOptions<T>): Promise<SolvedSession<T>> {
  const sessionId = o.sessionId ?? newSessionId();
  const f = o.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const ch = await fetchChallenge(o.baseUrl, o.publishableKey, sessionId, { fetch: f, ...(o.signal ? { signal: o.signal } : {}) });
  const solution = await solveChallenge(ch, o.signal);
  const s: Submission = { sessionId, payload: encodePayload(ch, solution) };
  if (typeof o.submit === "function") return { sessionId, authorization: await o.submit(s) };
  const resp = await f(o.submit, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(s),
    credentials: "same-origin",
    signal: o.signal ?? null,
  });
  if (!resp.ok) throw await errorOf("submit", resp);
  return { sessionId, authorization: (await resp.json()) as T };
}

/** Fetches a challenge for sessionId with the tenant's publishable key. */
export async function fetchChallenge(
  baseUrl: string,
  publishableKey: string,
  sessionId: string,
  opts: { fetch?: typeof fetch; signal?: AbortSignal } = {},
): Promise<Challenge> {
  if (!sessionIdPattern.test(sessionId)) {
    throw new TypeError("sluice captcha: a session ID is 16 to 128 characters of A-Z a-z 0-9 _ -");
  }
  if (!publishableKey.startsWith("pk_")) {
    throw new TypeError("sluice captcha: use the tenant's publishable key (pk_live_…): a secret key must never reach a browser");
  }
  const f = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const url = `${baseUrl.replace(/\/+$/, "")}/v1/captcha/challenge?${new URLSearchParams({ pk: publishableKey, sid: sessionId })}`;
  const resp = await f(url, { headers: { Accept: "application/json" }, credentials: "omit", signal: opts.signal ?? null });
  if (!resp.ok) throw await errorOf("challenge", resp);
  return (await resp.json()) as Challenge;
}

/**
 * Finds the challenge's counter by trying 0, 1, … up to its maxNumber: the one whose derived key,
 * SHA-256(salt ‖ nonce ‖ uint32 big-endian counter), starts with keyPrefix. It hashes a batch of
 * counters at a time, so Web Crypto's promises do not cost a round trip each.
 */
export async function solveChallenge(ch: Challenge, signal?: AbortSignal): Promise<Solution> {
  const p = ch.parameters;
  if (p.algorithm !== "SHA-256" || p.cost !== 1 || p.keyLength !== 32 || !hex32.test(p.salt) || !hex32.test(p.nonce) || !hex32.test(p.keyPrefix)) {
    throw new Error(`sluice captcha: a challenge this helper cannot solve (${p.algorithm}, cost ${p.cost}, keyLength ${p.keyLength})`);
  }
  const maxNumber = Number(p.data.maxNumber);
  if (!Number.isSafeInteger(maxNumber) || maxNumber < 1 || maxNumber > 0xffffffff) {
    throw new Error(`sluice captcha: maxNumber ${p.data.maxNumber} is not a counter bound`);
  }
  const start = performance.now();
  const prefix = fromHex(p.keyPrefix);
  const head = concat(fromHex(p.salt), fromHex(p.nonce));
  const batch = 512;
  for (let base = 0; base <= maxNumber; base += batch) {
    signal?.throwIfAborted();
    const n = Math.min(batch, maxNumber - base + 1);
    const digests = await Promise.all(
      Array.from({ length: n }, (_, i) => {
        const msg = new Uint8Array(head.length + 4);
        msg.set(head);
        new DataView(msg.buffer).setUint32(head.length, base + i, false);
        return crypto.subtle.digest("SHA-256", msg);
      }),
    );
    for (let i = 0; i < n; i++) {
      const key = new Uint8Array(digests[i]!);
      if (startsWith(key, prefix)) {
        return { counter: base + i, derivedKey: toHex(key), time: Math.round((performance.now() - start) * 10) / 10 };
      }
    }
  }
  throw new Error(`sluice captcha: no counter in [0, ${maxNumber}] solves the challenge`);
}

/** The payload the backend submits: standard base64 of {challenge, solution}, as the widget makes it. */
export function encodePayload(ch: Challenge, s: Solution): string {
  const json = JSON.stringify({
    challenge: { parameters: ch.parameters, signature: ch.signature },
    solution: { counter: s.counter, derivedKey: s.derivedKey, time: s.time },
  });
  // Every character is ASCII (hex, digits, the algorithm's name), so btoa takes it as it is.
  return btoa(json);
}

async function errorOf(step: string, resp: Response): Promise<CaptchaError> {
  const text = await resp.text().catch(() => "");
  let code = "";
  let detail = text.slice(0, 200).trim() || resp.statusText;
  try {
    const p = JSON.parse(text) as { code?: unknown; detail?: unknown };
    if (typeof p.code === "string") code = p.code;
    if (typeof p.detail === "string") detail = p.detail;
  } catch {
    // Not JSON: the text is the detail.
  }
  return new CaptchaError(step, resp.status, code, detail);
}

function fromHex(h: string): Uint8Array {
  const out = new Uint8Array(h.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(h.slice(2 * i, 2 * i + 2), 16);
  return out;
}

function toHex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function startsWith(key: Uint8Array, prefix: Uint8Array): boolean {
  for (let i = 0; i < prefix.length; i++) if (key[i] !== prefix[i]) return false;
  return true;
}
