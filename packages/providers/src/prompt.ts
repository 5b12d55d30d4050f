/**
 * Turnwarden's history and tool specs in the AI SDK's provider-level form (LanguageModelV3).
 *
 * Tool call ids are the provider's and need not be unique (S1 counts occurrences); a provider
 * API refuses a prompt whose ids repeat, so a call id seen before in the history is renamed for
 * the prompt (`<id>~<n>`), and its result — found by its assistant message and `callIndex` —
 * with it. The history itself is never changed.
 */
import type {
  LanguageModelV3FunctionTool,
  LanguageModelV3Message,
  LanguageModelV3Prompt,
} from '@ai-sdk/provider';
import type { HistoryMessage } from '@turnwarden/protocol';
import type { ToolSpec } from '@turnwarden/session';

const ANY_OBJECT = { type: 'object', additionalProperties: true } as const;

/** Arguments are JSON text as the model produced them; malformed text is passed on as a string. */
function input(args: string): unknown {
  try {
    return JSON.parse(args) as unknown;
  } catch {
    return args;
  }
}

export function toPrompt(history: readonly HistoryMessage[]): LanguageModelV3Prompt {
  const prompt: LanguageModelV3Message[] = [];
  const seen = new Set<string>();
  /** The prompt ids of the last assistant message's calls, by call index. */
  let ids: string[] = [];
  for (const m of history) {
    switch (m.role) {
      case 'system':
        prompt.push({ role: 'system', content: m.content });
        break;
      case 'user':
        prompt.push({ role: 'user', content: [{ type: 'text', text: m.content }] });
        break;
      case 'assistant': {
        ids = (m.toolCalls ?? []).map((call) => {
          let id = call.id === '' ? 'call' : call.id;
          for (let n = 2; seen.has(id); n++) id = `${call.id}~${n}`;
          seen.add(id);
          return id;
        });
        prompt.push({
          role: 'assistant',
          content: [
            ...(m.content === '' ? [] : [{ type: 'text' as const, text: m.content }]),
            ...(m.toolCalls ?? []).map((call, i) => ({
              type: 'tool-call' as const,
              toolCallId: ids[i]!,
              toolName: call.name,
              input: input(call.arguments),
            })),
          ],
        });
        break;
      }
      case 'tool': {
        const part = {
          type: 'tool-result' as const,
          toolCallId: ids[m.callIndex] ?? m.toolCallId,
          toolName: m.name,
          output: m.isError
            ? { type: 'error-text' as const, value: m.content }
            : { type: 'text' as const, value: m.content },
        };
        // Results of one assistant message travel together (Anthropic requires it).
        const last = prompt.at(-1);
        if (last?.role === 'tool') last.content.push(part);
        else prompt.push({ role: 'tool', content: [part] });
        break;
      }
    }
  }
  return prompt;
}

export function toTools(tools: readonly ToolSpec[]): LanguageModelV3FunctionTool[] {
  return tools.map((t) => ({
    type: 'function',
    name: t.name,
    description: t.description,
    inputSchema: (t.parameters ?? ANY_OBJECT) as LanguageModelV3FunctionTool['inputSchema'],
  }));
}
