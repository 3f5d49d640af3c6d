// The real Sluice server the tests talk to (no mock of Sluice anywhere), started as
// client/go/main_test.go does: built from the repository's root, served on a throwaway SQLite
// database, with a tenant and a secret key made by its command line.
import { execFile, spawn } from "node:child_process";
import { rmSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

// GO is the go command (make passes its $(GO)); go by default.

// This file runs from client/typescript/dist/test/.
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

/** A loopback address nothing listens on once it returns: connections to it are refused. */
export async function freeAddr() {
  const l = createServer();
  await new Promise((resolve, reject) => l.once("error", reject).listen(0, "127.0.0.1", resolve));
  const { port } = l.address();
  await new Promise((resolve) => l.close(resolve));
  return `127.0.0.1:${port}`;
}

/**
 * Builds and starts `sluice serve` (with moreEnv added to its environment), creates the tenant, a
 * secret and a publishable key, and returns { baseUrl, secretKey, publishableKey, bin, dir, env,
 * stop } (bin, dir and env run more of its command line); stop ends it with SIGINT and rejects on
 * an unclean exit.
 */
export async function startSluice(moreEnv = {}) {
  const dir = await mkdtemp(join(tmpdir(), "sluice-ts-client-test-"));
  const bin = join(dir, "sluice");
  try {
    await run(process.env.GO || "go", ["build", "-o", bin, "./cmd/app"], { cwd: repoRoot, maxBuffer: 16 << 20 });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw new Error(`go build ./cmd/app: ${err.message}\n${err.stderr ?? ""}`);
  }
  const addr = await freeAddr();
  const baseUrl = `http://${addr}`;
  const env = {
    ...process.env,
    DATABASE_URL: `sqlite:${join(dir, "s.db")}`,
    LISTEN_ADDR: addr,
    METRICS_ADDR: "127.0.0.1:0",
    BASE_URL: baseUrl,
    LOG_LEVEL: "warn",
    WEBHOOK_ALLOW_PRIVATE: "true", // the tests' webhook receivers listen on loopback
    ...moreEnv,
  };
  const server = spawn(bin, ["serve"], { cwd: dir, env, stdio: ["ignore", "pipe", "pipe"] });
  // Should the test process end without stop (an uncaught error, Ctrl-C, the runner's SIGTERM),
  // the server goes with it. A SIGKILL of the tests still leaves it running: Node has no
  // Pdeathsig, which client/go's tests use.
  const killOnExit = () => {
    server.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };
  const killOnSignal = (signal) => {
    killOnExit();
    process.kill(process.pid, signal); // the handlers are once: the default action follows
  };
  process.on("exit", killOnExit);
  process.once("SIGINT", killOnSignal);
  process.once("SIGTERM", killOnSignal);
  let output = "";
  server.stderr.on("data", (b) => (output += b));
  const exited = new Promise((resolve) => server.once("exit", (code, signal) => resolve({ code, signal })));
  const listening = new Promise((resolve) => {
    createInterface({ input: server.stdout }).on("line", (line) => {
      output += line + "\n";
      if (line.startsWith("Sluice is listening on")) resolve();
    });
  });

  const stop = async () => {
    process.off("exit", killOnExit);
    process.off("SIGINT", killOnSignal);
    process.off("SIGTERM", killOnSignal);
    if (server.exitCode === null && server.signalCode === null) server.kill("SIGINT");
    let timer;
    const { code, signal } = await Promise.race([
      exited,
      new Promise((resolve) => {
        timer = setTimeout(() => {
          server.kill("SIGKILL");
          resolve({ code: null, signal: "SIGKILL (ignored SIGINT for 20 s)" });
        }, 20_000);
      }),
    ]);
    clearTimeout(timer);
    await rm(dir, { recursive: true, force: true });
    if (code !== 0) throw new Error(`sluice serve did not shut down cleanly: code ${code}, signal ${signal}\n${output}`);
  };

  let startTimer;
  const started = await Promise.race([
    listening.then(() => "listening"),
    exited.then(({ code, signal }) => `exited (code ${code}, signal ${signal}) before listening`),
    new Promise((resolve) => (startTimer = setTimeout(resolve, 60_000, "not listening after 60 s"))),
  ]);
  clearTimeout(startTimer);
  if (started !== "listening") {
    await stop().catch(() => {});
    throw new Error(`sluice serve ${started}\n${output}`);
  }

  try {
    await run(bin, ["tenant", "create", "clienttests"], { cwd: dir, env });
    const { stdout } = await run(bin, ["key", "create", "--tenant", "clienttests", "--label", "ts client tests"], { cwd: dir, env });
    const secretKey = stdout.split("\n")[0].trim(); // the secret alone on the first line
    if (!secretKey) throw new Error(`key create printed no key: ${JSON.stringify(stdout)}`);
    const pk = await run(bin, ["key", "create", "--tenant", "clienttests", "--label", "ts captcha tests", "--publishable"], { cwd: dir, env });
    const publishableKey = pk.stdout.split("\n")[0].trim();
    if (!publishableKey.startsWith("pk_")) throw new Error(`key create --publishable printed no key: ${JSON.stringify(pk.stdout)}`);
    return { baseUrl, secretKey, publishableKey, bin, dir, env, stop };
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
}
