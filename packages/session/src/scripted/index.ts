/** The built-in offline model `scripted` and its script language. */
export { SCRIPT_LIMITS } from './limits.js';
export { createScriptedModel, SCRIPT_DONE_TEXT } from './model.js';
export { parseScript } from './parse.js';
export type { Script, ScriptSegment, ScriptStep, ScriptStepKind } from './types.js';
