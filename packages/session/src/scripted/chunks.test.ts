import { describe, expect, it } from 'vitest';
import { splitChunks } from './chunks.js';

describe('splitChunks', () => {
  it('splits into the requested number of near-equal pieces', () => {
    expect(splitChunks('hello', 4)).toEqual(['he', 'l', 'l', 'o']);
    expect(splitChunks('abcdefgh', 4)).toEqual(['ab', 'cd', 'ef', 'gh']);
  });

  it('gives fewer pieces when the text is shorter, none when empty', () => {
    expect(splitChunks('ab', 4)).toEqual(['a', 'b']);
    expect(splitChunks('', 4)).toEqual([]);
  });

  it('never splits a code point', () => {
    const pieces = splitChunks('😀😀😀', 2);
    expect(pieces).toEqual(['😀😀', '😀']);
  });

  it('joins back to the text', () => {
    const text = 'The quick brown fox jumps over the lazy dog';
    for (const n of [1, 3, 7, 100]) expect(splitChunks(text, n).join('')).toBe(text);
  });
});
