/**
 * The offline model `scripted` (opt-in: the `@turnwarden/session/scripted` plugin module): it plays the script in the last user message, or
 * echoes that message when it is not a script. Stateless and deterministic: model call k of
 * a turn (k = assistant messages after the last user message) plays segment k of the script.
 */
import { ErrorCode, errors, isTurnwardenError } from '@turnwarden/protocol';
import type { ModelEvent, ModelProvider, ModelRequest, TurnSignals } from '../contracts.js';
import { DEFAULT_CHUNKS } from './limits.js';
import { parseScript } from './parse.js';
import { playSegment } from './play.js';
import { turnPosition } from './position.js';
import { streamText } from './stream-text.js';
import type { Script } from './types.js';

/** What the model says once the script has no segment left for the call. */
export const SCRIPT_DONE_TEXT = 'done';

function scriptOf(content: string): Script | undefined {
  try {
    return parseScript(content);
  } catch (error) {
    if (!isTurnwardenError(error, ErrorCode.INVALID_SCRIPT)) throw error;
    throw errors.modelError(`scripted model: invalid script: ${error.message}`, undefined, { cause: error });
  }
}

async function* play(req: ModelRequest, ctx: TurnSignals): AsyncGenerator<ModelEvent, void, undefined> {
  const { content, modelCall } = turnPosition(req.history);
  const script = scriptOf(content);
  if (script === undefined) {
    yield* streamText(`echo: ${content}`, DEFAULT_CHUNKS, 0, ctx.signal);
    return;
  }
  const segment = script.segments[modelCall];
  if (segment === undefined) {
    yield* streamText(SCRIPT_DONE_TEXT, 1, 0, ctx.signal);
    return;
  }
  yield* playSegment(segment, ctx);
}

export function createScriptedModel(): ModelProvider {
  return {
    name: 'scripted',
    stream: (req, ctx) => play(req, ctx),
    // A malformed script is refused with INVALID_SCRIPT naming the step, before the claim.
    checkInput: (content) => {
      parseScript(content);
    },
  };
}
