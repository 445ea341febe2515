import { randomUUID } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { partitionOf, partitionTag } from '../src/storage/redis-keys.ts'
import { LLM_CALL_USD, llmCall, startHarness, unique, type Harness } from './helpers/harness.ts'
import { waitFor } from './helpers/process.ts'
import { startRedisCluster, type RedisCluster } from './helpers/redis-cluster.ts'

/**
 * A slot migrating to another master under load, and a master killed -9 under load
 * and its replica promoted. Clients retry what was
 * refused (503) with the same event_id, as the client libraries do. With REDIS_WAIT_REPLICAS=1
 * nothing acknowledged is lost and nothing is stored twice; without it, what a failover
 * loses is measured and reported (replication is asynchronous), and still nothing twice.
 */
let running: Array<{ stop(): Promise<void> }> = []
const dataDir = mkdtempSync(join(tmpdir(), 'burnrate-failover-'))
afterEach(async () => {
  for (const r of running.reverse()) await r.stop()
  running = []
})

/** The node serving a user's partition, as the cluster says now. */
async function masterOf(cluster: RedisCluster, userId: string) {
  const { master } = await cluster.servedBy(await slotOfUser(cluster, userId))
  return cluster.nodes.find((n) => n.port === master)!
}

/** The slot of a user's partition: every key of the user is in it. */
function slotOfUser(cluster: RedisCluster, userId: string): Promise<number> {
  return cluster.slotOf(partitionTag(partitionOf(userId, 16)))
}

/**
 * Posts `count` events, 10 at a time, of agent x or of `agents` agents in turn, each retried
 * while refused (503) until answered; their ids, and when each 503 came (ms).
 */
async function load(h: Harness, key: string, count: number, onAcked: (n: number) => Promise<void> | void, agents = 0): Promise<string[] & { refusedAt: number[] }> {
  const acked = Object.assign([] as string[], { refusedAt: [] as number[] })
  let next = 0
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      for (let i = next++; i < count; i = next++) {
        const eventId = randomUUID()
        const event = llmCall(agents ? `x${i % agents}` : 'x', { event_id: eventId })
        // A store away answers 503: retried with the same event_id, as clients do.
        const res = await waitFor(
          async () => {
            const r = await h.post('/events', event, key)
            if (r.statusCode !== 503) return r
            acked.refusedAt.push(Date.now())
            return undefined
          },
          60_000,
          'an answer other than 503 (burnrate recovered from the fault)',
        )
        expect(res.statusCode, res.body).toBe(200)
        acked.push(eventId)
        await onAcked(acked.length)
      }
    }),
  )
  return acked
}

/** The events stored in ClickHouse for the user: ids with how often each is stored. */
async function stored(h: Harness, userId: string): Promise<Map<string, number>> {
  const rs = await h.services.clickhouse.query({
    query: "SELECT toString(event_id) AS id, count() AS n FROM events WHERE user_id = {u:String} GROUP BY id",
    query_params: { u: userId },
    format: 'JSONEachRow',
  })
  return new Map((await rs.json<{ id: string; n: string }>()).map((r) => [r.id, Number(r.n)]))
}

async function failover(wait: boolean): Promise<{ acked: number; lost: number; twice: number; refused: number; refusedAfterPromotion: number }> {
  const cluster = await startRedisCluster()
  running.push(cluster)
  // One data path for the file: chDB opens one per process.
  const h = await startHarness({ dataDir, env: { REDIS_CLUSTER_NODES: cluster.seeds.join(','), REDIS_WAIT_REPLICAS: wait ? '1' : '0', EVENTS_RATE_LIMIT: '1000000' } })
  running.push({ stop: () => h.close() })
  const user = unique('u')
  const key = await h.key(user)
  const master = await masterOf(cluster, user)
  let killed = false
  let restarted: Promise<unknown> | null = null
  let promotedAt = Infinity
  const acked = await load(h, key, 400, async (n) => {
    if (n === 150 && !killed) {
      killed = true
      await master.kill() // kill -9, in the middle of the load
      // An operator brings it back: it rejoins as the replica of the master that replaced it
      // (with the replica wait, its shard takes no write until some replica confirms it).
      // Once the cluster has failed it over: the slot served by another node.
      const slot = await slotOfUser(cluster, user)
      restarted = waitFor(async () => ((await cluster.servedBy(slot)).master !== master.port ? true : undefined), 30_000, 'the failed master replaced').then(() => {
        promotedAt = Date.now()
        return cluster.restart(master)
      })
    }
  })
  expect(killed).toBe(true)
  await restarted
  // Everything acknowledged reaches ClickHouse once the shipper has run on the new master.
  await h.flush()
  const rows = await stored(h, user)
  const lost = acked.filter((id) => !rows.has(id)).length
  const twice = [...rows.values()].filter((n) => n > 1).length
  // Refused once the cluster had promoted the replica, past the client's slot map refresh
  // (a second) and the check's own polling (up to 2 answers of CLUSTER SLOTS).
  const refusedAfterPromotion = acked.refusedAt.filter((t) => t > promotedAt + 1500).length
  return { acked: acked.length, lost, twice, refused: acked.refusedAt.length, refusedAfterPromotion }
}

describe('a master killed -9 under load', () => {
  it('with REDIS_WAIT_REPLICAS=1, loses nothing acknowledged and stores nothing twice', async () => {
    const r = await failover(true)
    console.log(`failover with REDIS_WAIT_REPLICAS=1: ${r.refused} requests refused (503), ${r.refusedAfterPromotion} after the replica's promotion (writes wait for a replica until the old master rejoins)`)
    expect(r).toMatchObject({ acked: 400, lost: 0, twice: 0 })
  }, 120_000)

  it('without it, stores nothing twice, and what it lost is measured', async () => {
    const r = await failover(false)
    console.log(`failover without REDIS_WAIT_REPLICAS: ${r.lost} of ${r.acked} acknowledged events lost; ${r.refused} requests refused (503), ${r.refusedAfterPromotion} after the replica's promotion`)
    expect(r.twice).toBe(0)
    expect(r.acked).toBe(400)
    // Refused only while the slot had no master: none once the cluster promoted the replica.
    expect(r.refusedAfterPromotion).toBe(0)
  }, 120_000)
})

/** Moves one slot from the master serving it to another, key by key, as `redis-cli --cluster reshard` does. */
async function migrateSlot(cluster: RedisCluster, slot: number, onKeysMoved: () => void, pauseMs = 0): Promise<number> {
  const ids = new Map<number, string>()
  for (const n of cluster.nodes) ids.set(n.port, ((await n.redis.call('CLUSTER', 'MYID')) as string).trim())
  const fromPort = (await cluster.servedBy(slot)).master
  // Any other master: the one serving slot 0 or the last slot is another than this one.
  const toPort = [(await cluster.servedBy(0)).master, (await cluster.servedBy(16383)).master].find((port) => port !== fromPort)!
  const from = cluster.nodes.find((n) => n.port === fromPort)!
  const to = cluster.nodes.find((n) => n.port === toPort)!
  await to.redis.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', ids.get(fromPort)!)
  await from.redis.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', ids.get(toPort)!)
  for (;;) {
    const keys = (await from.redis.call('CLUSTER', 'GETKEYSINSLOT', slot, 10)) as string[]
    if (keys.length === 0) break
    await from.redis.call('MIGRATE', '127.0.0.1', toPort, '', 0, 5000, 'KEYS', ...keys)
    onKeysMoved()
    if (pauseMs) await new Promise((resolve) => setTimeout(resolve, pauseMs))
  }
  for (const n of cluster.nodes) await n.redis.call('CLUSTER', 'SETSLOT', slot, 'NODE', ids.get(toPort)!).catch(() => {})
  return toPort
}

describe('a slot migrating to another master under load', () => {
  it("refuses nothing and counts every event once, exactly, while the keys of the user's partition move", async () => {
    const cluster = await startRedisCluster()
    running.push(cluster)
    const h = await startHarness({ dataDir, env: { REDIS_CLUSTER_NODES: cluster.seeds.join(','), EVENTS_RATE_LIMIT: '1000000' } })
    running.push({ stop: () => h.close() })
    const user = unique('u')
    const key = await h.key(user)
    const slot = await slotOfUser(cluster, user)
    // 200 agents with state in the slot first: the move takes many batches, and each call
    // (an agent's keys, its fleet's, the journal's stream) meets keys on both nodes.
    const AGENTS = 200
    const seeded = await h.post('/events/batch', { events: Array.from({ length: AGENTS }, (_, i) => llmCall(`x${i}`, { event_id: randomUUID() })) }, key)
    expect(seeded.statusCode).toBe(200)
    let migration: Promise<number> | null = null
    let batches = 0
    let ackedSoFar = 0
    let ackedWhenMoved = 0
    const acked = await load(
      h,
      key,
      600,
      (n) => {
        ackedSoFar = n
        // Batch after batch with a pause, as a reshard of a busy slot goes: a few seconds
        // in which many calls find their keys split over the two nodes.
        if (n === 100) {
          const began = Date.now()
          migration = migrateSlot(cluster, slot, () => batches++, 40).then((port) => {
            ackedWhenMoved = ackedSoFar
            const s = (Date.now() - began) / 1000
            console.log(`slot moved in ${s.toFixed(1)} s (${batches} batches of keys): ${((ackedWhenMoved - 100) / s).toFixed(0)} events/s acknowledged meanwhile`)
            return port
          })
        }
      },
      AGENTS,
    )
    const toPort = await migration!
    // Not one request refused while the slot moved: calls refused TRYAGAIN were tried again.
    expect(acked.refusedAt).toEqual([])
    // The keys moved in batches while events came in, and events came after the slot moved.
    expect(batches).toBeGreaterThan(10)
    expect(ackedWhenMoved).toBeGreaterThan(100)
    expect(ackedWhenMoved).toBeLessThan(600)
    expect((await masterOf(cluster, user)).port).toBe(toPort)
    const fleet = (await h.get('/fleet', key)).json()
    expect(fleet.total_cost_usd).toBeCloseTo((AGENTS + 600) * LLM_CALL_USD, 9)
    const rows = await stored(h, user)
    expect(acked.filter((id) => rows.get(id) !== 1)).toEqual([])
    expect(rows.size).toBe(AGENTS + 600)
    expect([...rows.values()].every((n) => n === 1)).toBe(true)
  }, 120_000)
})
