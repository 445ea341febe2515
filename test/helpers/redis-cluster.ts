import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { Cluster } from 'ioredis'
import { waitFor } from './process.ts'
import { startRedis } from './redis.ts'

const REDIS_CLI = '/usr/bin/redis-cli'
// A short node timeout: a killed master is failed over within seconds. A replica syncs at
// once (a diskless sync waits 5 s by default for more replicas to join it).
const NODE_ARGS = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000', '--repl-diskless-sync-delay', '0']
const READY_MS = 20_000

type Node = Awaited<ReturnType<typeof startRedis>>

export interface RedisCluster {
  /** host:port of every node, masters and replicas: the seeds a client starts from. */
  seeds: string[]
  nodes: Node[]
  /** A client of the test's own (ioredis Cluster). */
  cluster: Cluster
  /** Starts a node that was killed again, on its port and data: it rejoins (a master that was failed over, as a replica). */
  restart(node: Node): Promise<Node>
  /** The slot a key (or a hash tag such as {p3}) hashes to. */
  slotOf(key: string): Promise<number>
  /** The ports of the master serving `slot` and of its replicas, as the cluster says now. */
  servedBy(slot: number): Promise<{ master: number; replicas: number[] }>
  stop(): Promise<void>
}

/**
 * A Redis Cluster of the test file's own, from the machine's redis-server: three
 * masters with one replica each, AOF on, created with `redis-cli --cluster create`, resolved
 * once every node says cluster_state:ok and every slot is served.
 */
export async function startRedisCluster(opts: { masters?: number } = {}): Promise<RedisCluster> {
  const masters = opts.masters ?? 3
  const root = mkdtempSync(join(tmpdir(), 'burnrate-cluster-'))
  const nodes: Node[] = []
  try {
    for (let i = 0; i < masters * 2; i++) {
      const dir = join(root, `node-${i}`)
      mkdirSync(dir)
      nodes.push(await startRedis({ dir, args: NODE_ARGS }))
    }
    const seeds = nodes.map((n) => `127.0.0.1:${n.port}`)
    await promisify(execFile)(REDIS_CLI, ['--cluster', 'create', ...seeds, '--cluster-replicas', '1', '--cluster-yes'], { timeout: READY_MS })
    await ready(nodes)
    const cluster = new Cluster(
      nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
      { redisOptions: { maxRetriesPerRequest: 1 } },
    )
    return {
      seeds,
      nodes,
      cluster,
      async slotOf(key) {
        return Number(await cluster.call('CLUSTER', 'KEYSLOT', key))
      },
      async servedBy(slot) {
        const ranges = (await cluster.call('CLUSTER', 'SLOTS')) as Array<[number, number, ...Array<[string, number, string]>]>
        const [, , master, ...replicas] = ranges.find(([from, to]) => slot >= from && slot <= to)!
        return { master: master![1], replicas: replicas.map(([, port]) => port) }
      },
      async restart(node) {
        const again = await startRedis({ port: node.port, dir: node.dir, args: NODE_ARGS })
        nodes[nodes.indexOf(node)] = again
        return again
      },
      async stop() {
        cluster.disconnect()
        await Promise.all(nodes.map((n) => n.stop()))
      },
    }
  } catch (err) {
    await Promise.all(nodes.map((n) => n.kill()))
    throw err
  }
}

/**
 * Every node agrees the cluster is up, with all 16384 slots assigned, and every replica's
 * link to its master is up (a write can be confirmed by it), within a deadline.
 */
async function ready(nodes: Node[]): Promise<void> {
  const up = (i: string) => i.includes('cluster_state:ok') && i.includes('cluster_slots_ok:16384') && (i.includes('role:master') || i.includes('master_link_status:up'))
  await waitFor(
    async () => {
      const infos = await Promise.all(nodes.map(async (n) => `${(await n.redis.call('CLUSTER', 'INFO')) as string}\n${await n.redis.info('replication')}`))
      return infos.every(up) ? true : undefined
    },
    READY_MS,
    'every node of the cluster up, every slot served and every replica linked',
  )
}
