/**
 * Argument checks for the demo tools. Every bad argument becomes a TurnwardenError(TOOL_ERROR)
 * whose message names the tool and the argument, e.g. `sleep: args.ms must be a non-negative integer`.
 */
import { errors, type TurnwardenError } from '@turnwarden/protocol';
import { durationProblem, intervalProblem, isJsonObject, unknownKeys } from './checks.js';

function badArgs(tool: string, message: string): TurnwardenError {
  return errors.toolError(`${tool}: ${message}`, { tool });
}

/** Reads the arguments of one tool call; refuses non-objects and unknown keys. */
export class ToolArgs {
  private constructor(
    private readonly tool: string,
    private readonly args: Record<string, unknown>,
  ) {}

  static of(tool: string, args: unknown, allowed: readonly string[]): ToolArgs {
    if (!isJsonObject(args)) throw badArgs(tool, 'args must be a JSON object');
    const unknown = unknownKeys(args, allowed);
    if (unknown.length > 0) {
      const list = unknown.map((key) => JSON.stringify(key)).join(', ');
      throw badArgs(tool, `unknown argument(s) ${list} (expected: ${allowed.join(', ') || 'none'})`);
    }
    return new ToolArgs(tool, args);
  }

  private check(key: string, problem: string | undefined): void {
    if (problem !== undefined) throw badArgs(this.tool, `args.${key} ${problem}`);
  }

  /** A required (or defaulted) duration in ms, 0 to 1 hour. */
  duration(key: string, fallback?: number): number {
    const value = this.args[key] ?? fallback;
    this.check(key, durationProblem(value));
    return value as number;
  }

  /** A required (or defaulted) interval in ms, 1 to 1 hour. */
  interval(key: string, fallback?: number): number {
    const value = this.args[key] ?? fallback;
    this.check(key, intervalProblem(value));
    return value as number;
  }

  /** A required string. */
  string(key: string): string {
    const value = this.args[key];
    this.check(key, typeof value === 'string' ? undefined : 'must be a string');
    return value as string;
  }

  /** A required finite number. */
  number(key: string): number {
    const value = this.args[key];
    this.check(key, typeof value === 'number' && Number.isFinite(value) ? undefined : 'must be a number');
    return value as number;
  }

  /** An optional boolean. */
  boolean(key: string, fallback: boolean): boolean {
    const value = this.args[key] ?? fallback;
    this.check(key, typeof value === 'boolean' ? undefined : 'must be a boolean');
    return value as boolean;
  }
}
