/** Parses one step of a script. A step has exactly one kind key; unknown keys are refused. */
import { isJsonObject } from '../tools/checks.js';
import { DEFAULT_HEARTBEAT_EVERY_MS } from '../tools/wait.js';
import { invalidScript } from './invalid.js';
import { DEFAULT_CHUNKS, SCRIPT_LIMITS } from './limits.js';
import { countAt, durationAt, intervalAt, objectAt, textAt, trueAt } from './parse-fields.js';
import { parseToolCalls } from './parse-tools.js';
import type { ScriptStep, ScriptStepKind } from './types.js';

/** The keys each kind of step allows; the first one is the kind key. */
const STEP_KEYS: Readonly<Record<ScriptStepKind, readonly string[]>> = {
  text: ['text', 'chunks', 'delayMs'],
  tools: ['tools'],
  sleep: ['sleep'],
  heartbeat: ['heartbeat', 'everyMs'],
  stall: ['stall'],
  wedge: ['wedge'],
  fail: ['fail'],
};

const KINDS = Object.keys(STEP_KEYS) as ScriptStepKind[];

function kindOf(step: Record<string, unknown>, path: string): ScriptStepKind {
  const found = KINDS.filter((kind) => Object.hasOwn(step, kind));
  const [kind] = found;
  if (kind === undefined || found.length > 1) {
    const seen = found.length > 1 ? ` (found ${found.join(', ')})` : '';
    throw invalidScript(path, `must have exactly one of the keys ${KINDS.join(', ')}${seen}`);
  }
  return kind;
}

/** `path` is the step's path (`script[3]`); `segment` the index of the segment it belongs to. */
export function parseStep(value: unknown, path: string, segment: number): ScriptStep {
  if (!isJsonObject(value)) throw invalidScript(path, 'must be an object');
  const kind = kindOf(value, path);
  const step = objectAt(value, path, STEP_KEYS[kind], `a ${kind} step`);
  switch (kind) {
    case 'text':
      return {
        kind,
        text: textAt(step.text, `${path}.text`, SCRIPT_LIMITS.maxTextBytes),
        chunks: countAt(step.chunks ?? DEFAULT_CHUNKS, `${path}.chunks`, SCRIPT_LIMITS.maxChunks),
        delayMs: durationAt(step.delayMs ?? 0, `${path}.delayMs`),
      };
    case 'tools':
      return { kind, calls: parseToolCalls(step.tools, `${path}.tools`, segment) };
    case 'sleep':
      return { kind, ms: durationAt(step.sleep, `${path}.sleep`) };
    case 'heartbeat':
      return {
        kind,
        ms: durationAt(step.heartbeat, `${path}.heartbeat`),
        everyMs: intervalAt(step.everyMs ?? DEFAULT_HEARTBEAT_EVERY_MS, `${path}.everyMs`),
      };
    case 'stall':
      trueAt(step.stall, `${path}.stall`);
      return { kind };
    case 'wedge':
      trueAt(step.wedge, `${path}.wedge`);
      return { kind };
    case 'fail':
      return { kind, message: textAt(step.fail, `${path}.fail`, SCRIPT_LIMITS.maxTextBytes, true) };
  }
}
