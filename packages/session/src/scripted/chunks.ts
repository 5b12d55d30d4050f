/**
 * Splits `text` into `count` pieces of near-equal length (never splitting a code point); fewer
 * when the text has fewer code points, none for the empty text. Joined, they give back `text`.
 */
export function splitChunks(text: string, count: number): string[] {
  const points = Array.from(text);
  const n = Math.min(Math.max(1, count), points.length);
  const base = Math.floor(points.length / Math.max(1, n));
  const extra = points.length % Math.max(1, n);
  const chunks: string[] = [];
  let start = 0;
  for (let i = 0; i < n; i += 1) {
    const size = base + (i < extra ? 1 : 0);
    chunks.push(points.slice(start, start + size).join(''));
    start += size;
  }
  return chunks;
}
