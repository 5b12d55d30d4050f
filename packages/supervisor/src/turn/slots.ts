/**
 * The running turns by clock slot: the watchdog's reports (abort-protocol.ts) find their turn
 * here. A turn registers itself when it is armed and leaves when it ends (turn.ts).
 */
import type { Turn } from './turn.js';

export class TurnSlots {
  private readonly bySlot = new Map<number, Turn>();

  on(slot: number): Turn | undefined {
    return this.bySlot.get(slot);
  }

  attach(turn: Turn): void {
    this.bySlot.set(turn.worker.slot, turn);
  }

  /** Leaves the slot unless a later turn holds it already. */
  detach(turn: Turn): void {
    if (this.bySlot.get(turn.worker.slot) === turn) this.bySlot.delete(turn.worker.slot);
  }

  /** The clock slot of the workstream's running turn, if one runs (a test seam's lookup). */
  slotOf(workstreamId: string): number | undefined {
    for (const [slot, turn] of this.bySlot) if (turn.workstreamId === workstreamId) return slot;
    return undefined;
  }

  get size(): number {
    return this.bySlot.size;
  }
}
