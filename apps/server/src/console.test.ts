/**
 * The live console in a real browser: headless Chromium (Debian's `chromium`, driven by
 * playwright-core) opens the page, connects with a token, creates a workstream, sends a message
 * and sees its tokens stream, then sees a stalled turn reported as aborted by the watchdog.
 * A screenshot is written to apps/server/test-artifacts/. Skipped, saying why, where no
 * Chromium is installed (.ci/run installs it).
 */
import { existsSync, mkdirSync } from 'node:fs';
import { chromium, type Page } from 'playwright-core';
import { afterEach, describe, expect, it } from 'vitest';
import { checkServerConfig, type RunningServer, startServer } from './index.js';

const CHROMIUM = ['/usr/bin/chromium', '/usr/bin/chromium-browser'].find((p) => existsSync(p));
const TOKEN = 'console-token-0123456789abc';
const ARTIFACTS = new URL('../test-artifacts/', import.meta.url);

if (CHROMIUM === undefined) {
  process.stdout.write(
    'console.test.ts: skipped — no Chromium at /usr/bin/chromium (apt-get install chromium)\n',
  );
}

let server: RunningServer | undefined;
afterEach(async () => {
  await server?.shutdown();
  server = undefined;
});

/**
 * Starts the server with `runtime`, opens the console in headless Chromium, connects with the
 * token and creates a workstream; runs `use` on the page, then closes the browser.
 */
async function inConsole(
  runtime: Record<string, unknown>,
  use: (page: Page) => Promise<void>,
): Promise<void> {
  server = await startServer(
    checkServerConfig({
      port: 0,
      db: ':memory:',
      logLevel: 'silent',
      tokens: [{ token: TOKEN, tenantId: 'acme', principal: 'alice' }],
      runtime,
    }),
  );
  const browser = await chromium.launch({ executablePath: CHROMIUM!, args: ['--headless', '--no-sandbox'] });
  try {
    const page = await browser.newPage();
    await page.goto(`${server.url}/console`);
    await page.fill('#token', TOKEN);
    await page.click('#login button');
    await page.waitForSelector('#who:text("connected")', { timeout: 10_000 });
    await page.click('#create');
    await page.waitForSelector('#list li.selected', { timeout: 10_000 });
    await use(page);
  } finally {
    await browser.close();
  }
}

describe.skipIf(CHROMIUM === undefined)('the live console in headless Chromium', () => {
  it('streams a turn’s tokens and reports a stalled turn as aborted by the watchdog', async () => {
    await inConsole(
      {
        // Quick enough for the stalled turn, and far above the streamed turn's silences on a
        // machine whose other core is busy.
        watchdog: { timeoutMs: 1_500, pollMs: 25, graceMs: 300 },
        pool: { maxWorkers: 2, warmWorkers: 1 },
      },
      async (page) => {
        // A streamed answer: its tokens appear in the transcript as they arrive.
        const answer = 'Streaming through the console, token by token.';
        await page.fill('#message', JSON.stringify({ script: [{ text: answer, chunks: 8, delayMs: 30 }] }));
        await page.click('#send');
        await page.locator('#transcript .assistant', { hasText: answer }).waitFor({ timeout: 10_000 });
        await page.waitForSelector('#transcript .system:text("completed")', { timeout: 10_000 });
        // A stalled turn: the watchdog aborts it and the page says so.
        await page.fill('#message', JSON.stringify({ script: [{ text: 'Thinking…' }, { stall: true }] }));
        await page.click('#send');
        await page.waitForSelector('#warnings .warning:text("watchdog")', { timeout: 10_000 });
        await page.waitForSelector('#transcript .system:text("interrupted")', { timeout: 10_000 });
        expect(await page.textContent('#machine')).toBe('idle');
        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({ path: new URL('console.png', ARTIFACTS).pathname, fullPage: true });
        const warnings = await page.textContent('#warnings');
        expect(warnings).toMatch(/watchdog/i);
      },
    );
  }, 60_000);

  it('A3: a call that needs approval shows Approve and Deny; approve resumes the turn and the call runs, deny resumes it with the call denied', async () => {
    await inConsole(
      { pool: { maxWorkers: 2, warmWorkers: 1 }, approvals: { tools: ['echo'] } },
      async (page) => {
        const echo = (text: string) =>
          JSON.stringify({
            script: [{ tools: [{ name: 'echo', args: { text } }] }, { text: `after ${text}` }],
          });
        await page.fill('#message', echo('approve me'));
        await page.click('#send');
        const first = page.locator('#transcript .approval').first();
        await first.waitFor({ timeout: 10_000 });
        expect(await first.textContent()).toContain('echo');
        await page.waitForSelector('#transcript .system:text("awaiting_approval")', { timeout: 10_000 });
        await first.locator('button.approve').click();
        await page
          .locator('#transcript .tool', { hasText: '↳ echo → approve me' })
          .waitFor({ timeout: 10_000 });
        await page
          .locator('#transcript .assistant', { hasText: 'after approve me' })
          .waitFor({ timeout: 10_000 });
        expect(await first.textContent()).toContain('approved');
        await page.fill('#message', echo('deny me'));
        await page.click('#send');
        const second = page.locator('#transcript .approval').nth(1);
        await second.waitFor({ timeout: 10_000 });
        await second.locator('button.deny').click();
        await page
          .locator('#transcript .tool', { hasText: 'denied: denied in the console' })
          .waitFor({ timeout: 10_000 });
        await page
          .locator('#transcript .assistant', { hasText: 'after deny me' })
          .waitFor({ timeout: 10_000 });
        expect(await page.textContent('#machine')).toBe('idle');
        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({ path: new URL('console-approval.png', ARTIFACTS).pathname, fullPage: true });
      },
    );
  }, 60_000);
});
