/** T1: the bearer-token table on its own — the exact header shape, each grant's caller. */
import { describe, expect, it } from 'vitest';
import { Tokens } from './auth.js';

const tokens = new Tokens([
  { token: 'alice-token', tenantId: 'acme', principal: 'alice' },
  { token: 'bob-token', tenantId: 'globex', principal: 'bob' },
]);

describe('Tokens (T1)', () => {
  it('T1: each token names its own tenant and principal', () => {
    expect(tokens.callerOf('Bearer alice-token')).toEqual({ tenantId: 'acme', principal: 'alice' });
    expect(tokens.callerOf('Bearer bob-token')).toEqual({ tenantId: 'globex', principal: 'bob' });
    expect(tokens.size).toBe(2);
    expect(new Tokens([]).size).toBe(0);
  });

  it('T1: only the whole header `Bearer <token>` counts: anything before or after it, another scheme, an unknown token or no header is no caller', () => {
    for (const header of [
      undefined,
      '',
      'Bearer',
      'Bearer ',
      'bearer alice-token',
      'Basic alice-token',
      'X Bearer alice-token',
      'xBearer alice-token',
      'Bearer alice-token trailing',
      'Bearer alice-token\t',
      'Bearer  alice-token',
      'Bearer alice-tokens',
      'Bearer alice-toke',
    ]) {
      expect(tokens.callerOf(header), JSON.stringify(header)).toBeUndefined();
    }
  });
});
