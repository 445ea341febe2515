import { readFileSync } from 'node:fs'
import type { Browser, Page } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ManualClock } from '../src/clock.ts'
import { closeClean, eventuallyText, launchBrowser, open as openIn, signIn, SKIP, SKIPPED, textOf, visible, WAIT } from './helpers/browser.ts'
import { llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'

/**
 * The dashboard's Costs page (GET /costs, GET /costs/dimensions) in a real browser, against a
 * real burnrate whose clock the test sets, so events land in the hours and days it chooses;
 * the page's own clock is set to the same instant.
 */
const HOUR = 3_600_000
const DAY = 24 * HOUR
const NOW = Date.UTC(2026, 10, 24, 12, 30)
const clock = new ManualClock(NOW)

let h: Harness
let base: string
let browser: Browser

const open = () => openIn(browser, base, { fixedTime: new Date(NOW) })

/** `n` calls of `body` at `at` (the server's receive time). */
async function post(key: string, at: number, n: number, body: Record<string, unknown>) {
  clock.set(at)
  for (let i = 0; i < n; i++) {
    const res = await h.post('/events', body, key)
    expect(res.statusCode, res.body).toBe(200)
  }
  clock.set(NOW)
}

// Browser-side expressions as strings: this project's TypeScript has no DOM library.
const tableRows = (page: Page) => page.evaluate<string[][]>(`[...document.querySelectorAll('table.groups tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent))`)
const rowsAre = (page: Page) => expect.poll(() => tableRows(page), WAIT)
const chartLabel = (page: Page) => expect.poll(() => page.locator('.costs .chart').getAttribute('aria-label', { timeout: 500 }).catch(() => null), WAIT)
const options = (page: Page, label: string) => page.getByLabel(label, { exact: true }).locator('option').allTextContents()

/**
 * gpt-4o 1000 in / 500 out: 0.0075 USD; gpt-4o-mini: 0.00045. October 28: zeta 1 (in the
 * last 30 days, not in this month). Three days before now: delta 4 (initech, team). In the
 * last 24 h: alpha 3 calls (acme, chat), beta 2 on mini (globex), gamma 1 without metadata.
 * Oldest first: the service's receive times never go back, whatever its clock says.
 */
async function seedFleet(key: string) {
  await post(key, Date.UTC(2026, 9, 28, 8), 1, llmCall('zeta'))
  await post(key, NOW - 3 * DAY, 4, llmCall('delta', { metadata: { customer: 'initech', team: 'x' } }))
  await post(key, NOW - 2 * HOUR, 3, llmCall('alpha', { metadata: { customer: 'acme', feature: 'chat' } }))
  await post(key, NOW - 1 * HOUR, 2, llmCall('beta', { model: 'gpt-4o-mini', metadata: { customer: 'globex' } }))
  await post(key, NOW - 30 * 60_000, 1, llmCall('gamma'))
  await h.flush()
}

describe.skipIf(SKIP)(SKIP ? SKIPPED : 'the Costs page in a real browser', () => {
  beforeAll(async () => {
    h = await startHarness({ clock })
    base = `${await h.listen()}/`
    browser = await launchBrowser()
  })

  afterAll(async () => {
    await browser?.close()
    await h?.close()
  })

  it('charts and lists the groups of the seeded events, offers the metadata keys, and asks again when the dimension, the range or a filter changes', async () => {
    const key = await h.key(unique('u'))
    await seedFleet(key)
    const w = await open()
    const { page } = w
    await signIn(page, key)
    await page.getByRole('link', { name: 'Costs' }).click()
    expect(page.url()).toBe(`${base}#/costs`)
    expect(await page.getByRole('link', { name: 'Costs' }).getAttribute('aria-current')).toBe('')

    // By agent, the last 24 h (the 24 UTC hours that end with the current one).
    await rowsAre(page).toEqual([
      ['alpha', '$0.0225', '3', '3,000', '1,500', '3'],
      ['gamma', '$0.0075', '1', '1,000', '500', '1'],
      ['beta', '$0.0009', '2', '2,000', '1,000', '2'],
    ])
    await chartLabel(page).toBe('Cost by Agent, top 3: alpha $0.0225, gamma $0.0075, beta $0.0009')
    await visible(page.locator('.costs .chart canvas'))
    expect(await textOf(page.locator('.costs .summary'))).toBe('2026-11-23 13:00 to 2026-11-24 13:00 UTC')
    expect(w.urls).toContain(`${base}costs?group_by=agent&from=2026-11-23T13%3A00%3A00.000Z&to=2026-11-24T13%3A00%3A00.000Z&limit=50`)
    // An agent's group links to its page.
    expect(await page.locator('table.groups tbody tr').first().getByRole('link', { name: 'alpha' }).getAttribute('href')).toBe('#/agents/alpha')

    // The metadata keys of the range, the most used first, offered as dimensions and as a filter.
    const fixed = ['Agent', 'Model', 'Day (UTC)', 'Hour (UTC)', 'Run']
    await expect.poll(() => options(page, 'Group by'), WAIT).toEqual([...fixed, 'customer (5 events)', 'feature (3 events)'])
    expect(await options(page, 'Metadata key')).toEqual(['None', 'customer', 'feature'])

    await page.getByLabel('Group by', { exact: true }).selectOption('metadata.customer')
    await rowsAre(page).toEqual([
      ['acme', '$0.0225', '3', '3,000', '1,500', '3'],
      ['(none)', '$0.0075', '1', '1,000', '500', '1'],
      ['globex', '$0.0009', '2', '2,000', '1,000', '2'],
    ])
    expect(await textOf(page.locator('table.groups thead'))).toBe('customerCostLLM callsInput tokensOutput tokensEvents')
    await page.getByLabel('Then by', { exact: true }).selectOption('model')
    await rowsAre(page).toEqual([
      ['acme', 'gpt-4o', '$0.0225', '3', '3,000', '1,500', '3'],
      ['(none)', 'gpt-4o', '$0.0075', '1', '1,000', '500', '1'],
      ['globex', 'gpt-4o-mini', '$0.0009', '2', '2,000', '1,000', '2'],
    ])
    await chartLabel(page).toBe('Cost by customer · Model, top 3: acme · gpt-4o $0.0225, (none) · gpt-4o $0.0075, globex · gpt-4o-mini $0.0009')
    // The second dimension offers everything but the first.
    expect(await options(page, 'Then by')).toEqual(['Nothing else', ...fixed, 'feature (3 events)'])

    // Seven days: delta's calls of three days ago, and its key.
    await page.getByLabel('Range', { exact: true }).selectOption('7d')
    await rowsAre(page).toEqual([
      ['initech', 'gpt-4o', '$0.03', '4', '4,000', '2,000', '4'],
      ['acme', 'gpt-4o', '$0.0225', '3', '3,000', '1,500', '3'],
      ['(none)', 'gpt-4o', '$0.0075', '1', '1,000', '500', '1'],
      ['globex', 'gpt-4o-mini', '$0.0009', '2', '2,000', '1,000', '2'],
    ])
    expect(w.urls).toContain(
      `${base}costs?group_by=metadata.customer&group_by=model&from=2026-11-17T13%3A00%3A00.000Z&to=2026-11-24T13%3A00%3A00.000Z&limit=50`,
    )
    await expect.poll(() => options(page, 'Group by'), WAIT).toEqual([...fixed, 'customer (9 events)', 'team (4 events)', 'feature (3 events)'])
    expect(await page.getByLabel('Group by', { exact: true }).inputValue()).toBe('metadata.customer')

    // Filters: an agent; then a metadata value instead.
    await page.getByLabel('Agent', { exact: true }).fill('alpha')
    await page.getByRole('button', { name: 'Apply' }).click()
    await rowsAre(page).toEqual([['acme', 'gpt-4o', '$0.0225', '3', '3,000', '1,500', '3']])
    await page.getByLabel('Agent', { exact: true }).fill('')
    await page.getByLabel('Metadata key', { exact: true }).selectOption('customer')
    await page.getByLabel('Value', { exact: true }).fill('globex')
    await page.getByLabel('Value', { exact: true }).press('Enter')
    await rowsAre(page).toEqual([['globex', 'gpt-4o-mini', '$0.0009', '2', '2,000', '1,000', '2']])
    expect(w.urls.some((u) => u.includes('&metadata.customer=globex&'))).toBe(true)
    await page.getByLabel('Metadata key', { exact: true }).selectOption('')
    await page.getByRole('button', { name: 'Apply' }).click()

    // 30 days hold zeta's call of October 28; this month does not.
    await page.getByLabel('Then by', { exact: true }).selectOption('')
    await page.getByLabel('Group by', { exact: true }).selectOption('agent')
    await page.getByLabel('Range', { exact: true }).selectOption('30d')
    await rowsAre(page).toEqual([
      ['delta', '$0.03', '4', '4,000', '2,000', '4'],
      ['alpha', '$0.0225', '3', '3,000', '1,500', '3'],
      ['gamma', '$0.0075', '1', '1,000', '500', '1'],
      ['zeta', '$0.0075', '1', '1,000', '500', '1'],
      ['beta', '$0.0009', '2', '2,000', '1,000', '2'],
    ])
    await page.getByLabel('Range', { exact: true }).selectOption('month')
    await eventuallyText(page.locator('.costs .summary')).toBe('2026-11-01 00:00 to 2026-11-24 13:00 UTC')
    expect((await tableRows(page)).map((r) => r[0])).toEqual(['delta', 'alpha', 'gamma', 'beta'])

    // A custom range starts as the one on screen; November 21 alone holds delta's calls.
    await page.getByLabel('Range', { exact: true }).selectOption('custom')
    expect(await page.getByLabel('From (UTC)', { exact: true }).inputValue()).toBe('2026-11-01T00:00')
    expect(await page.getByLabel('To (UTC)', { exact: true }).inputValue()).toBe('2026-11-24T13:00')
    await page.getByLabel('From (UTC)', { exact: true }).fill('2026-11-21T00:00')
    await page.getByLabel('To (UTC)', { exact: true }).fill('2026-11-22T00:00')
    await page.getByRole('button', { name: 'Apply' }).click()
    await rowsAre(page).toEqual([['delta', '$0.03', '4', '4,000', '2,000', '4']])
    await chartLabel(page).toBe('Cost by Agent, top 1: delta $0.03')
    expect(await options(page, 'Metadata key')).toEqual(['None', 'customer', 'team'])

    // A range the API refuses: its own words.
    await page.getByLabel('To (UTC)', { exact: true }).fill('2026-11-20T00:00')
    await page.getByRole('button', { name: 'Apply' }).click()
    await eventuallyText(page.locator('.costs [role="alert"]')).toBe('Not shown: from: must be before to')
    await closeClean(w)
  })

  it('pages through the groups with next_cursor, and charts the most expensive ten', async () => {
    const key = await h.key(unique('u'))
    // 55 agents, agent-00 the most expensive (55 calls), agent-54 the least (1).
    for (let i = 0; i < 55; i++) {
      await post(key, NOW - HOUR, 1, llmCall(`agent-${String(i).padStart(2, '0')}`, { input_tokens: 1000 * (55 - i), output_tokens: 0 }))
    }
    await h.flush()
    const w = await open()
    const { page } = w
    await signIn(page, key)
    await page.goto(`${base}#/costs`)
    const pager = page.locator('.costs .pager .range')
    await eventuallyText(pager).toBe('groups 1–50')
    expect((await tableRows(page)).map((r) => r[0])).toEqual(Array.from({ length: 50 }, (_, i) => `agent-${String(i).padStart(2, '0')}`))
    await chartLabel(page).toMatch(/^Cost by Agent, top 10: agent-00 \$0\.1375, agent-01 \$0\.135, .*, agent-09 \$0\.115$/)
    await page.getByRole('button', { name: 'Next →' }).click()
    await eventuallyText(pager).toBe('groups 51–55')
    expect((await tableRows(page)).map((r) => r[0])).toEqual(['agent-50', 'agent-51', 'agent-52', 'agent-53', 'agent-54'])
    expect(await page.getByRole('button', { name: 'Next →' }).isDisabled()).toBe(true)
    // The chart stays the top of the whole range.
    expect(await page.locator('.costs .chart').getAttribute('aria-label')).toMatch(/^Cost by Agent, top 10: agent-00 /)
    await page.getByRole('button', { name: '← Previous' }).click()
    await eventuallyText(pager).toBe('groups 1–50')
    await closeClean(w)
  })

  it('downloads the query as CSV: the rows GET /costs?format=csv gives, the key sent as a header and never in a URL', async () => {
    const key = await h.key(unique('u'))
    // The last events the file's test sends: its receive times are the latest yet, whatever the clock says.
    await post(key, NOW - 20 * 60_000, 4, llmCall('delta', { metadata: { customer: 'initech' } }))
    await post(key, NOW - 20 * 60_000, 3, llmCall('alpha', { metadata: { customer: 'acme' } }))
    await post(key, NOW - 20 * 60_000, 1, llmCall('gamma'))
    // A value a spreadsheet would run, and one that needs quoting: the file holds them as the API writes them.
    await post(key, NOW - 20 * 60_000, 1, llmCall('alpha', { metadata: { customer: '=HYPERLINK("x")' } }))
    await post(key, NOW - 20 * 60_000, 1, llmCall('alpha', { metadata: { customer: 'a,"b"' } }))
    await h.flush()
    const w = await open()
    const { page } = w
    await signIn(page, key)
    await page.goto(`${base}#/costs`)
    await page.getByLabel('Range', { exact: true }).selectOption('7d')
    await page.getByLabel('Group by', { exact: true }).selectOption('metadata.customer')
    await page.getByLabel('Then by', { exact: true }).selectOption('agent')
    await rowsAre(page).toHaveLength(5)

    const [download] = await Promise.all([page.waitForEvent('download', WAIT), page.getByRole('button', { name: 'Download CSV' }).click()])
    const file = readFileSync((await download.path())!, 'utf8')
    const query = 'group_by=metadata.customer&group_by=agent&from=2026-11-17T13:00:00.000Z&to=2026-11-24T13:00:00.000Z&format=csv'
    const res = await h.get(`/costs?${query}`, key)
    expect(file).toBe(res.body)
    expect(download.suggestedFilename()).toBe('costs_20261117T130000_20261124T130000.csv')
    expect(file.split('\r\n').slice(0, 3)).toEqual(['metadata.customer,agent,cost_usd,llm_calls,input_tokens,output_tokens,events', 'initech,delta,0.03,4,4000,2000,4', 'acme,alpha,0.0225,3,3000,1500,3'])
    expect(file).toContain(`"'=HYPERLINK(""x"")",alpha,0.0075,1,1000,500,1\r\n`)
    expect(file).toContain(`"a,""b""",alpha,0.0075,1,1000,500,1\r\n`)
    await eventuallyText(page.locator('.csv-status')).toBe('Saved costs_20261117T130000_20261124T130000.csv.')

    // The key went as x-api-key: no URL the page asked for holds it, nor does the file's.
    for (const url of [...w.urls, download.url()]) expect(url).not.toContain(key.split('_')[2])
    expect(download.url()).toMatch(/^blob:/)
    await closeClean(w)
  })
})
