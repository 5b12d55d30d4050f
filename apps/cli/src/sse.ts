/**
 * The frames of a Server-Sent Events body, as the demo's and the bench's clients read
 * `GET …/events`: each frame's `event`, `id` and `data` lines (comments and keep-alives, which
 * carry no data, are skipped).
 */
export interface SseFrame {
  readonly event: string | undefined;
  readonly id: string | undefined;
  readonly data: string;
}

export async function* sseFrames(body: AsyncIterable<Uint8Array>): AsyncGenerator<SseFrame> {
  const decoder = new TextDecoder();
  let buf = '';
  for await (const bytes of body) {
    buf += decoder.decode(bytes, { stream: true });
    for (let end = buf.indexOf('\n\n'); end >= 0; end = buf.indexOf('\n\n')) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event: string | undefined;
      let id: string | undefined;
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
        else if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('id:')) id = line.slice(3).trim();
      }
      if (data.length > 0) yield { event, id, data: data.join('\n') };
    }
  }
}
