import type { Scenario } from '../scenario.js';
import { a3 } from './a3.scenario.js';
import { a4 } from './a4.scenario.js';
import { c1 } from './c1.scenario.js';
import { c3 } from './c3.scenario.js';
import { c7 } from './c7.scenario.js';
import { d4 } from './d4.scenario.js';
import { d6 } from './d6.scenario.js';
import { e2 } from './e2.scenario.js';
import { l3 } from './l3.scenario.js';
import { l4 } from './l4.scenario.js';
import { l6 } from './l6.scenario.js';
import { l7 } from './l7.scenario.js';
import { l8 } from './l8.scenario.js';
import { m3 } from './m3.scenario.js';
import { s3 } from './s3.scenario.js';
import { s6 } from './s6.scenario.js';
import { t7 } from './t7.scenario.js';

/** Every scenario, by guarantee id. */
export const SCENARIOS: readonly Scenario[] = [
  l3,
  l4,
  l6,
  l7,
  l8,
  s3,
  s6,
  t7,
  c1,
  c3,
  c7,
  e2,
  d4,
  d6,
  a3,
  a4,
  m3,
];
