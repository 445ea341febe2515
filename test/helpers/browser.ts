import { existsSync } from 'node:fs'
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core'
import { expect } from 'vitest'

/**
 * The dashboard's tests in a real browser: Debian's chromium, driven by playwright-core,
 * against a real burnrate listening on a port. What each page did that a test asserts never
 * happens (CSP violations, uncaught errors) is watched from its first script on.
 */
export const CHROMIUM = '/usr/bin/chromium'
export const SKIP = !existsSync(CHROMIUM) && !process.env.CI
export const SKIPPED = `dashboard tests skipped: ${CHROMIUM} is missing (apt-get install chromium; .ci/run installs it, and with CI set they run and fail instead)`
if (SKIP) console.warn(SKIPPED)

export const KEY_STORAGE = 'burnrate.apiKey'
export const WAIT = { timeout: 10_000 }

export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
}

/** What a page did that a test asserts never happens: CSP violations, uncaught errors; and every URL it asked for. */
export interface Watched {
  page: Page
  context: BrowserContext
  urls: string[]
  cspConsole: string[]
  pageErrors: string[]
  violations: () => Promise<string[]>
}

export interface OpenOptions {
  fixedTime?: Date
  clock?: boolean
  timezoneId?: string
}

/** A new browser context on `url`, its CSP violations, errors and requests recorded. */
export async function open(browser: Browser, url: string, opts: OpenOptions = {}): Promise<Watched> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US', timezoneId: opts.timezoneId ?? 'UTC' })
  // Init scripts run through the DevTools protocol, outside the page's CSP.
  await context.addInitScript({
    content: `{
      const seen = []
      Object.defineProperty(window, '__cspViolations', { value: seen })
      document.addEventListener('securitypolicyviolation', (e) => seen.push(e.violatedDirective + ' ' + e.blockedURI))
    }`,
  })
  const page = await context.newPage()
  if (opts.fixedTime) await page.clock.setFixedTime(opts.fixedTime)
  // The page's timers under the test's control: clock.runFor() fires the 10 s refresh at once.
  if (opts.clock) await page.clock.install()
  const watched: Watched = {
    page,
    context,
    urls: [],
    cspConsole: [],
    pageErrors: [],
    violations: () => page.evaluate<string[]>('[...window.__cspViolations]'),
  }
  page.on('request', (r) => watched.urls.push(r.url()))
  page.on('console', (m) => {
    if (/content security policy/i.test(m.text())) watched.cspConsole.push(m.text())
  })
  page.on('pageerror', (e) => watched.pageErrors.push(String(e)))
  await page.goto(url)
  return watched
}

export async function signIn(page: Page, key: string): Promise<void> {
  await page.getByLabel('API key').fill(key)
  await page.getByRole('button', { name: 'Sign in' }).click()
}

/** Asserts the page broke no rule of its CSP and threw nothing, then closes it. */
export async function closeClean(w: Watched): Promise<void> {
  expect(await w.violations()).toEqual([])
  expect(w.cspConsole).toEqual([])
  expect(w.pageErrors).toEqual([])
  await w.context.close()
}

// playwright-core has no expect of its own: vitest's expect.poll waits for the condition, with a deadline.
export const textOf = (l: Locator) => l.textContent({ timeout: 500 }).catch(() => null)
export const eventuallyText = (l: Locator) => expect.poll(() => textOf(l), WAIT)
export const visible = (l: Locator) => l.waitFor({ state: 'visible', ...WAIT })
