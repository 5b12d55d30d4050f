/** Parses the `tools` list of a `tools` step into the tool calls of one assistant message. */
import { Buffer } from 'node:buffer';
import type { ToolCall } from '@turnwarden/protocol';
import { isJsonObject } from '../tools/checks.js';
import { invalidScript } from './invalid.js';
import { SCRIPT_LIMITS } from './limits.js';
import { nameAt, objectAt } from './parse-fields.js';

/** The argument text: an object is serialized; a string is passed through verbatim (may be malformed JSON). */
function argsAt(value: unknown, path: string): string {
  let text: string;
  if (typeof value === 'string') text = value;
  else if (isJsonObject(value)) text = JSON.stringify(value);
  else throw invalidScript(path, 'must be an object or a string');
  if (Buffer.byteLength(text, 'utf8') > SCRIPT_LIMITS.maxArgsBytes) {
    throw invalidScript(path, `must be at most ${SCRIPT_LIMITS.maxArgsBytes} UTF-8 bytes as JSON text`);
  }
  return text;
}

/** `segment` is the index of the segment this step ends: default ids are `call_<segment>_<index>`. */
export function parseToolCalls(value: unknown, path: string, segment: number): ToolCall[] {
  if (!Array.isArray(value) || value.length === 0) throw invalidScript(path, 'must be a non-empty array');
  if (value.length > SCRIPT_LIMITS.maxToolCalls) {
    throw invalidScript(path, `must have at most ${SCRIPT_LIMITS.maxToolCalls} entries`);
  }
  return value.map((entry: unknown, index) => {
    const at = `${path}[${index}]`;
    const call = objectAt(entry, at, ['name', 'args', 'id'], 'a tool call');
    const name = nameAt(call.name, `${at}.name`);
    const args = argsAt(call.args, `${at}.args`);
    const id = call.id === undefined ? `call_${segment}_${index}` : nameAt(call.id, `${at}.id`);
    return { id, name, arguments: args };
  });
}
