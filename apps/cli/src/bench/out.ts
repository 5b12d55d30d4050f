/** The bench's only writer: everything it prints goes through here (no console in library code). */
export function out(text: string): void {
  process.stdout.write(text);
}

export function err(text: string): void {
  process.stderr.write(text);
}
