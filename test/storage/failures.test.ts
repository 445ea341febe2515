import { mkdtempSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { StoreUnavailableError } from '../../src/errors.ts'
import { createClickHouse } from '../../src/storage/clickhouse.ts'
import { select } from '../../src/storage/query.ts'
import { z } from 'zod'

// A store that does not answer is a 503 naming it; a defect is a 500.
describe('ClickHouse failures, by type', () => {
  it('passes a query defect through as it is (a 500), never as an outage', async () => {
    const client = createClickHouse({ clickhouse: { kind: 'embedded', path: join(mkdtempSync(join(tmpdir(), 'burnrate-fail-')), 'ch') }, clickhouseDatabase: 'default' })
    try {
      const err = await select(client, 'SELECT * FROM no_such_table', {}, z.object({})).catch((e: unknown) => e)
      expect(err).not.toBeInstanceOf(StoreUnavailableError)
      expect(err).toMatchObject({ code: '60' }) // UNKNOWN_TABLE
    } finally {
      await client.close()
    }
  })

  it('calls a server that refuses connections unavailable, naming ClickHouse', async () => {
    // A port that was free a moment ago: nothing listens there.
    const probe = createServer().listen(0, '127.0.0.1')
    await new Promise((r) => probe.once('listening', r))
    const { port } = probe.address() as { port: number }
    await new Promise((r) => probe.close(r))
    const client = createClickHouse({ clickhouse: { kind: 'server', url: `http://127.0.0.1:${port}` }, clickhouseDatabase: 'default' })
    try {
      const err = await select(client, 'SELECT 1 AS x', {}, z.object({ x: z.number() })).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(StoreUnavailableError)
      expect(err).toMatchObject({ store: 'ClickHouse' })
    } finally {
      await client.close()
    }
  })
})
