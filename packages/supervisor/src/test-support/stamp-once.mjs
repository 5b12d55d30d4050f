// Stamps one clock slot from a separate thread, then reports.
import { parentPort, workerData } from 'node:worker_threads';
import { SlotStamp } from '@turnwarden/clock';

const ok = new SlotStamp(workerData.clock, workerData.slot).touch(5);
parentPort.postMessage({ ok });
