/**
 * @turnwarden/supervisor/harness — the testing entry with the harness's variants installed
 * (src/mutants.ts): what the interleaving harness imports. Harness build only (dist-harness/,
 * never published); a host's build has neither this entry nor the variants.
 */
import { installMutants } from './mutants.js';

installMutants();

export * from './testing.js';
