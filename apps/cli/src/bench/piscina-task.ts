/**
 * The piscina task of the activation bench (runs inside a piscina worker): echoes `n`, or
 * spins forever when asked to (the abort demonstration).
 */
export interface PiscinaTaskInput {
  readonly n?: number;
  readonly spin?: boolean;
}

export default function task(input: PiscinaTaskInput): number {
  if (input.spin === true) {
    let x = 0;
    for (;;) x = (x + 1) | 0;
  }
  return input.n ?? 0;
}
