import { describe, expect, it } from 'vitest'
import { GroupCommitter } from '../../src/ingest/group-commit.ts'

/** A commit function that records its batches and can be made to fail. */
function recorder(opts: { fail?: (batch: number[]) => boolean; delayMs?: number } = {}) {
  const batches: number[][] = []
  const commit = async (items: number[]) => {
    batches.push(items)
    await new Promise((r) => setTimeout(r, opts.delayMs ?? 5))
    if (opts.fail?.(items)) throw new Error('insert failed')
    return items.map((i) => i * 10)
  }
  return { batches, commit }
}

describe('GroupCommitter', () => {
  it('answers each caller with its own item result', async () => {
    const r = recorder()
    const gc = new GroupCommitter(r.commit, { maxItems: 100, maxWaitMs: 1 })
    expect(await Promise.all([1, 2, 3].map((i) => gc.submit(i)))).toEqual([10, 20, 30])
  })

  it('groups items that arrive while a commit runs into the next commit', async () => {
    const r = recorder({ delayMs: 20 })
    const gc = new GroupCommitter(r.commit, { maxItems: 1000, maxWaitMs: 0 })
    const first = gc.submit(0)
    await new Promise((res) => setTimeout(res, 5)) // the first commit is running now
    const rest = Array.from({ length: 50 }, (_, i) => gc.submit(i + 1))
    await Promise.all([first, ...rest])
    expect(r.batches.map((b) => b.length)).toEqual([1, 50])
  })

  it('caps a batch at maxItems', async () => {
    const r = recorder()
    const gc = new GroupCommitter(r.commit, { maxItems: 10, maxWaitMs: 1 })
    await Promise.all(Array.from({ length: 25 }, (_, i) => gc.submit(i)))
    expect(r.batches.map((b) => b.length)).toEqual([10, 10, 5])
    expect(r.batches.flat()).toEqual(Array.from({ length: 25 }, (_, i) => i))
  })

  it('rejects every caller of a failed batch and none of the next', async () => {
    const r = recorder({ fail: (b) => b.includes(3) })
    const gc = new GroupCommitter(r.commit, { maxItems: 5, maxWaitMs: 1 })
    const results = await Promise.allSettled(Array.from({ length: 10 }, (_, i) => gc.submit(i)))
    expect(results.slice(0, 5).every((x) => x.status === 'rejected')).toBe(true)
    expect(results.slice(5).map((x) => (x.status === 'fulfilled' ? x.value : null))).toEqual([50, 60, 70, 80, 90])
    expect(gc.stats).toMatchObject({ commits: 1, failures: 1 })
  })

  it('close() commits what is queued and refuses new items', async () => {
    const r = recorder()
    const gc = new GroupCommitter(r.commit, { maxItems: 100, maxWaitMs: 10_000 })
    const pending = Array.from({ length: 5 }, (_, i) => gc.submit(i))
    await gc.close()
    expect(await Promise.all(pending)).toEqual([0, 10, 20, 30, 40])
    await expect(gc.submit(9)).rejects.toThrow(/closed/)
  })
})
