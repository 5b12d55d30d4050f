/**
 * The seam where the interleaving harness's build swaps a part for a broken variant. Where a
 * part is built or called across a part's boundary — the engine building its parts, abandon
 * calling repair, a rewrite's admission and the turn's end waiting for it — the code names the
 * part through `variant(…)`. In the build a host runs nothing is installed and `variant(X)` is
 * `X`. The harness build (`@turnwarden/supervisor/harness`, src/harness.ts) first installs the
 * variants of src/mutants.ts: subclasses and functions that break one mechanism while a harness
 * switch is on (`turnwarden stress --mutation NAME`), and behave as the part otherwise. So the
 * parts carry no switch, and the shipped build holds no variant (scripts/build.mjs).
 */
const installed = new Map<unknown, unknown>();

/** The part itself, or the variant the harness build installed in its place. */
export function variant<T>(part: T): T {
  return (installed.get(part) as T | undefined) ?? part;
}

/** Installs `replacement` for `part` (src/harness.ts only, before a runtime is built). */
export function installVariant<T>(part: T, replacement: T): void {
  installed.set(part, replacement);
}
