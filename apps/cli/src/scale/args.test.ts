/** `turnwarden scale`'s flags: defaults, the N list, the provider, the workload, and refusals. */
import { describe, expect, it } from 'vitest';
import { defaultBoundMs, parseNs, parseScaleArgs, SCALE_DEFAULTS, ScaleUsageError } from './args.js';
import { DEFAULT_WORKLOAD } from './workload.js';

describe('scale flags', () => {
  it('defaults to the issue: N 250, 500, 1000, the scripted model, watchdog 10 s / 250 ms', () => {
    const a = parseScaleArgs([]);
    expect(a).toMatchObject({
      ns: [250, 500, 1_000],
      providers: ['scripted'],
      json: false,
      quick: false,
      help: false,
      timeoutMs: 10_000,
      pollMs: 250,
      emptyWorkers: 50,
    });
    expect(a.workload).toEqual({ tokens: 180, delayMs: 33, toolMs: 3_000, heartbeatMs: 250 });
    expect(a.boundMs).toBe(defaultBoundMs(DEFAULT_WORKLOAD));
  });

  it('takes a leading `scale`, --quick (a smaller default N), --json and --help', () => {
    expect(parseScaleArgs(['scale', '--quick', '--json'])).toMatchObject({
      ns: [...SCALE_DEFAULTS.quickNs],
      quick: true,
      json: true,
      emptyWorkers: SCALE_DEFAULTS.quickEmptyWorkers,
    });
    expect(parseScaleArgs(['--quick', '--n', '7']).ns).toEqual([7]);
    expect(parseScaleArgs(['-h']).help).toBe(true);
  });

  it('parses the N list in its order', () => {
    expect(parseNs('250,500,1000')).toEqual([250, 500, 1_000]);
    expect(parseNs(' 1000 , 3 ,')).toEqual([1_000, 3]);
    expect(parseScaleArgs(['--n=100,250']).ns).toEqual([100, 250]);
  });

  it('maps the provider: scripted, http, or both in that order', () => {
    expect(parseScaleArgs(['--provider', 'http']).providers).toEqual(['http']);
    expect(parseScaleArgs(['--provider', 'both']).providers).toEqual(['scripted', 'http']);
    expect(parseScaleArgs(['--provider', 'scripted']).providers).toEqual(['scripted']);
  });

  it('takes the workload, the watchdog and the bounds', () => {
    const a = parseScaleArgs([
      '--tokens',
      '4',
      '--delay-ms',
      '5',
      '--tool-ms',
      '100',
      '--heartbeat-ms',
      '25',
      '--timeout-ms',
      '2000',
      '--poll-ms',
      '50',
      '--bound-s',
      '9',
      '--empty-workers',
      '3',
    ]);
    expect(a.workload).toEqual({ tokens: 4, delayMs: 5, toolMs: 100, heartbeatMs: 25 });
    expect(a).toMatchObject({ timeoutMs: 2_000, pollMs: 50, boundMs: 9_000, emptyWorkers: 3 });
  });

  it('bounds a turn at ten ideal turns, at least a minute', () => {
    expect(defaultBoundMs(DEFAULT_WORKLOAD)).toBe(148_140);
    expect(defaultBoundMs({ tokens: 4, delayMs: 5, toolMs: 100, heartbeatMs: 25 })).toBe(60_000);
  });

  it.each([
    [['--n']],
    [['--n', '']],
    [['--n', '0']],
    [['--n', '5000']],
    [['--n', '10,x']],
    [['--n', '10,10']],
    [['--n', '-3']],
    [['--provider', 'gpt']],
    [['--tokens', '0']],
    [['--delay-ms', '1.5']],
    [['--heartbeat-ms', '0']],
    [['--poll-ms', '2000', '--timeout-ms', '1000']],
    [['--bound-s', '0']],
    [['--nope']],
    [['extra']],
  ])('refuses %j', (argv) => {
    expect(() => parseScaleArgs(argv)).toThrow(ScaleUsageError);
  });
});
