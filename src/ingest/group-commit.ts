/**
 * Group commit: callers submit one item each and wait; items that arrive together are
 * committed together, one commit at a time. A commit starts when the batch is full or the
 * oldest item has waited `maxWaitMs`; while it runs, new items gather for the next one,
 * so under load batches grow by themselves (as a database groups fsyncs).
 * Each caller gets its own item's result, or the commit's error.
 */
export interface GroupCommitOptions {
  maxItems: number
  maxWaitMs: number
  /** Told about every commit (for metrics). */
  onCommit?: (c: { size: number; waitMs: number; durationMs: number; ok: boolean }) => void
}

export interface GroupCommitStats {
  queued: number
  committing: number
  commits: number
  failures: number
  lastBatchSize: number
  /** How long the oldest item of the last batch waited before its commit started. */
  lastWaitMs: number
}

interface Pending<T, R> {
  item: T
  queuedAt: number
  resolve: (r: R) => void
  reject: (e: unknown) => void
}

export class GroupCommitter<T, R> {
  readonly #commit: (items: T[]) => Promise<R[]>
  readonly #opts: GroupCommitOptions
  #queue: Pending<T, R>[] = []
  #timer: NodeJS.Timeout | null = null
  #running: Promise<void> | null = null
  #closed = false
  readonly stats: GroupCommitStats = { queued: 0, committing: 0, commits: 0, failures: 0, lastBatchSize: 0, lastWaitMs: 0 }

  constructor(commit: (items: T[]) => Promise<R[]>, opts: GroupCommitOptions) {
    this.#commit = commit
    this.#opts = opts
  }

  submit(item: T): Promise<R> {
    if (this.#closed) return Promise.reject(new Error('group committer is closed'))
    return new Promise<R>((resolve, reject) => {
      this.#queue.push({ item, queuedAt: performance.now(), resolve, reject })
      this.stats.queued = this.#queue.length
      this.#schedule()
    })
  }

  /** Commits everything queued and refuses new items. */
  async close(): Promise<void> {
    this.#closed = true
    while (this.#running || this.#queue.length > 0) {
      if (!this.#running) this.#start()
      await this.#running
    }
  }

  #schedule(): void {
    if (this.#running) return // the running commit starts the next one when it ends
    if (this.#queue.length >= this.#opts.maxItems) return this.#start()
    this.#timer ??= setTimeout(() => this.#start(), this.#opts.maxWaitMs)
  }

  #start(): void {
    if (this.#timer) clearTimeout(this.#timer)
    this.#timer = null
    if (this.#running || this.#queue.length === 0) return
    const batch = this.#queue.splice(0, this.#opts.maxItems)
    this.stats.queued = this.#queue.length
    this.stats.committing = batch.length
    this.stats.lastBatchSize = batch.length
    this.stats.lastWaitMs = performance.now() - batch[0]!.queuedAt
    this.#running = this.#run(batch).finally(() => {
      this.#running = null
      this.stats.committing = 0
      if (this.#queue.length > 0) this.#start()
    })
  }

  async #run(batch: Pending<T, R>[]): Promise<void> {
    const started = performance.now()
    let ok = false
    try {
      const results = await this.#commit(batch.map((p) => p.item))
      ok = true
      this.stats.commits++
      batch.forEach((p, i) => p.resolve(results[i]!))
    } catch (err) {
      this.stats.failures++
      for (const p of batch) p.reject(err)
    }
    this.#opts.onCommit?.({ size: batch.length, waitMs: this.stats.lastWaitMs, durationMs: performance.now() - started, ok })
  }
}
