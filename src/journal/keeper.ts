import type { ClickHouseClient } from '@clickhouse/client'
import { JournalFencedError, type RedisJournal } from './redis-streams.ts'
import { shipBatch, type DeadLetter } from './shipper.ts'

/** pino-compatible. */
interface Log {
  info(obj: object, msg: string): void
  warn(obj: object, msg: string): void
}

/**
 * Keeps this instance's Redis journal alive and finishes the journals of instances that
 * died: every third of a lease it renews its own lease (rejoining under a new id
 * when it was taken for dead), and takes over every journal whose lease ran out, ships what
 * it holds (the batch under way first, with its token) and forgets it. Any instance may
 * take over any other; taking one over fences its owner out, so no timeout here has to
 * agree with another for an event to be stored once (redis-streams.ts).
 */
export function keepJournal(o: {
  journal: RedisJournal
  clickhouse: ClickHouseClient
  maxRows: number
  log: Log
  onDeadLetter?: (d: DeadLetter) => void
}): { stop(): Promise<void> } {
  const { journal, log } = o
  const draining = new Map<string, Promise<void>>()
  let stopped = false

  async function drain(dead: RedisJournal): Promise<void> {
    let rows = 0
    for (let batch = await dead.next(o.maxRows); batch && !stopped; batch = await dead.next(o.maxRows)) {
      await shipBatch(o.clickhouse, dead, batch, o.onDeadLetter)
      rows += batch.entries.length
    }
    if (stopped) return
    await dead.forget()
    log.info({ instance: dead.instance, rows }, 'shipped the journal of an instance that stopped')
  }

  async function tick(): Promise<void> {
    const instance = journal.instance
    try {
      await journal.renew()
    } catch (err) {
      if (!(err instanceof JournalFencedError)) return log.warn({ err }, 'could not renew the journal lease; will try again')
      log.warn({ instance }, 'this instance was taken for dead and its journal taken over: going on under a new id')
      await journal.rejoin(instance)
    }
    for (const dead of await journal.takeOverDead()) {
      // Taken again on every tick while it drains: that renews this instance's lease on it.
      if (draining.has(dead.instance)) continue
      const done = drain(dead)
        .catch((err: unknown) => log.warn({ err, instance: dead.instance }, 'could not ship the journal of a stopped instance; will try again'))
        .finally(() => draining.delete(dead.instance))
      draining.set(dead.instance, done)
    }
  }

  let running: Promise<void> = Promise.resolve()
  const timer = setInterval(() => {
    running = running.then(tick).catch((err: unknown) => log.warn({ err }, 'journal keeper failed; will try again'))
  }, journal.leaseMs / 3)
  timer.unref()
  return {
    async stop() {
      stopped = true
      clearInterval(timer)
      await running
      await Promise.all(draining.values())
    },
  }
}
