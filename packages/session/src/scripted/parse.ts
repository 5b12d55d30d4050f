/**
 * Recognizes and validates a script. The supervisor calls `parseScript` on a user message
 * before accepting it, so a bad script is refused before anything is written.
 */
import { isJsonObject, unknownKeys } from '../tools/checks.js';
import { invalidScript } from './invalid.js';
import { SCRIPT_LIMITS } from './limits.js';
import { parseStep } from './parse-step.js';
import type { Script, ScriptSegment, ScriptStep } from './types.js';

function parseJson(content: string): unknown {
  if (!content.trimStart().startsWith('{')) return undefined;
  try {
    return JSON.parse(content);
  } catch {
    return undefined;
  }
}

/**
 * The script in a user message's content, or undefined when the content is not a script
 * (plain text, not JSON, or a JSON value that is not an object with a `script` key).
 * Throws TurnwardenError(INVALID_SCRIPT) when it has a `script` key but is malformed; the
 * message starts with the path of the bad field (e.g. `script[2].heartbeat must be …`).
 */
export function parseScript(content: string): Script | undefined {
  const doc = parseJson(content);
  if (!isJsonObject(doc) || !Object.hasOwn(doc, 'script')) return undefined;
  const extra = unknownKeys(doc, ['script'])[0];
  if (extra !== undefined) {
    throw invalidScript(extra, 'is not allowed (a script message has only the key script)');
  }
  const raw = doc.script;
  if (!Array.isArray(raw)) throw invalidScript('script', 'must be an array');
  if (raw.length > SCRIPT_LIMITS.maxSteps) {
    throw invalidScript('script', `must have at most ${SCRIPT_LIMITS.maxSteps} steps`);
  }
  const steps: ScriptStep[] = [];
  const segments: ScriptSegment[] = [];
  let current: ScriptStep[] = [];
  raw.forEach((value: unknown, index) => {
    const step = parseStep(value, `script[${index}]`, segments.length);
    steps.push(step);
    current.push(step);
    if (step.kind === 'tools') {
      segments.push(current);
      current = [];
    }
  });
  if (current.length > 0) segments.push(current);
  return { steps, segments };
}
