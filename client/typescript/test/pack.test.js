// npm readiness: what `npm pack` would ship is the compiled package, its sources and its README,
// every entry point of package.json is among it, and the package has no runtime dependency.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
// This file runs from client/typescript/dist/test/.
const pkgDir = fileURLToPath(new URL("../../", import.meta.url));

test("npm pack ships dist/src, src, the README and package.json, and every export", async () => {
  const pkg = JSON.parse(await readFile(`${pkgDir}package.json`, "utf8"));
  assert.equal(pkg.dependencies, undefined, "no runtime dependencies");
  assert.equal(pkg.type, "module");

  // --ignore-scripts: the tests run on what tsc just compiled; prepack would compile it again.
  const { stdout } = await run("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: pkgDir, maxBuffer: 16 << 20 });
  const [{ files }] = JSON.parse(stdout);
  const paths = files.map((f) => f.path).sort();
  const stray = paths.filter((p) => !/^(dist\/src\/[\w.-]+|src\/[\w.-]+\.ts|README\.md|package\.json)$/.test(p));
  assert.deepEqual(stray, [], "files that should not ship");
  for (const [entry, targets] of Object.entries(pkg.exports)) {
    for (const target of Object.values(targets)) {
      assert.ok(paths.includes(target.replace(/^\.\//, "")), `export ${entry}: ${target} is not in the package`);
    }
  }
  for (const src of ["src/index.ts", "src/middleware.ts", "src/captcha.ts", "src/openapi.ts"]) assert.ok(paths.includes(src), `${src} ships`);
});
