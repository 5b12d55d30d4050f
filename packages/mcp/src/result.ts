/**
 * What an MCP answer and an MCP failure mean for a Turnwarden tool call: the result text, and
 * the effect of a failed call (S2).
 */
import { ProtocolError, SdkError, SdkErrorCode, SdkHttpError } from '@modelcontextprotocol/client';
import { STREAM_LOST } from './http-transport.js';

/** One content block of a tool result, as far as the text needs it. */
interface Block {
  readonly type?: unknown;
  readonly text?: unknown;
  readonly mimeType?: unknown;
  readonly uri?: unknown;
  readonly name?: unknown;
  readonly resource?: { readonly uri?: unknown; readonly text?: unknown; readonly mimeType?: unknown };
}

function blockText(block: Block): string {
  switch (block.type) {
    case 'text':
      return typeof block.text === 'string' ? block.text : '';
    case 'resource': {
      const r = block.resource;
      if (typeof r?.text === 'string') return r.text;
      return `[resource ${String(r?.uri ?? '')}${typeof r?.mimeType === 'string' ? ` (${r.mimeType})` : ''}]`;
    }
    case 'resource_link':
      return `[resource link ${String(block.uri ?? '')}]`;
    case 'image':
    case 'audio':
      return `[${block.type}${typeof block.mimeType === 'string' ? ` ${block.mimeType}` : ''} omitted]`;
    default:
      return `[${String(block.type)} content omitted]`;
  }
}

/**
 * The text of a tool result: its content blocks' text joined by newlines (a text resource gives
 * its text; images, audio and binary resources are named, not inlined). A result without content
 * gives its structured content as JSON.
 */
export function resultText(result: Readonly<Record<string, unknown>>): string {
  const content = Array.isArray(result.content) ? (result.content as Block[]) : [];
  if (content.length > 0) return content.map(blockText).join('\n');
  if (result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  if (result.toolResult !== undefined) return JSON.stringify(result.toolResult);
  return '';
}

/** How a failed call went: whether it may have reached the server, and whether its connection is lost. */
export interface Failure {
  /** `none`: the request certainly did not reach the tool. `unknown`: it may have run. */
  readonly effect: 'none' | 'unknown';
  /** The connection is unusable: replace it before the next call. */
  readonly lost: boolean;
}

/** JSON-RPC errors by which a server refuses a request it did not run. */
const REFUSALS: ReadonlySet<number> = new Set([-32_700, -32_600, -32_601, -32_602]);
/** Network errors before a connection existed: nothing was sent. */
const UNREACHABLE: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** The error codes (`ECONNREFUSED`, …) along an error's cause chain, an AggregateError's members included. */
function networkCodes(e: unknown, depth = 0): string[] {
  if (typeof e !== 'object' || e === null || depth > 5) return [];
  const code = (e as { code?: unknown }).code;
  const own = typeof code === 'string' ? [code] : [];
  const inner = e instanceof AggregateError ? e.errors.flatMap((x) => networkCodes(x, depth + 1)) : [];
  return [...own, ...inner, ...networkCodes((e as { cause?: unknown }).cause, depth + 1)];
}

/** Classifies an error with which `callTool` rejected (the turn not aborted). */
export function classify(e: unknown): Failure {
  if (SdkHttpError.isInstance(e)) {
    // A 4xx refused the request before it ran; a 404 means the server lost our session.
    const status = e.status;
    if (status >= 400 && status < 500) return { effect: 'none', lost: status === 404 };
    return { effect: 'unknown', lost: true };
  }
  if (SdkError.isInstance(e)) {
    if (e.code === SdkErrorCode.NotConnected) return { effect: 'none', lost: true };
    if (e.code === SdkErrorCode.ConnectionClosed) return { effect: 'unknown', lost: true };
    return { effect: 'unknown', lost: false };
  }
  if (ProtocolError.isInstance(e)) {
    if (e.code === STREAM_LOST) return { effect: 'unknown', lost: true };
    return { effect: REFUSALS.has(e.code) ? 'none' : 'unknown', lost: false };
  }
  // The client was closed between taking the connection and sending (`Not connected`).
  if (e instanceof Error && e.message === 'Not connected') return { effect: 'none', lost: true };
  const codes = networkCodes(e);
  if (codes.some((c) => UNREACHABLE.has(c))) return { effect: 'none', lost: true };
  // A fetch that failed otherwise (reset, terminated): the request may have been read.
  if (e instanceof TypeError || codes.length > 0) return { effect: 'unknown', lost: true };
  return { effect: 'unknown', lost: false };
}
