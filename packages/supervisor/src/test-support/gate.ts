/**
 * The test's side of the `gated` tool (plugin.mjs): the tool runs until the test opens the gate,
 * so a test does its work while the tool runs without racing the tool's length on a busy
 * machine. The worker threads of the runtime are in the test's process: a BroadcastChannel
 * reaches them.
 */
export interface Gate {
  /** The tool's arguments naming this gate. */
  readonly args: { readonly gate: string };
  /** Resolves once the tool listens for the gate (it then ends only when the gate opens). */
  readonly waiting: Promise<void>;
  /** Opens the gate: the tool returns. */
  open(): void;
  /** Stops listening (the channel would keep the test's process alive). */
  close(): void;
}

let gates = 0;

export function gate(): Gate {
  const name = `gate-${process.pid}-${++gates}`;
  const channel = new BroadcastChannel('turnwarden-test-gates');
  channel.unref();
  const waiting = new Promise<void>((resolve) => {
    channel.onmessage = (m) => {
      const data = (m as { data?: { gate?: string; waiting?: boolean } }).data;
      if (data?.gate === name && data.waiting === true) resolve();
    };
  });
  return {
    args: { gate: name },
    waiting,
    open: () => channel.postMessage({ gate: name, open: true }),
    close: () => channel.close(),
  };
}
