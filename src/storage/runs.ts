import type { ClickHouseClient } from '@clickhouse/client'
import { z } from 'zod'
import { select } from './query.ts'

const int = z.coerce.number().int()
const micros = z.coerce.number().int()

/**
 * One agent's part of a run, folded from the rows of `runs` (sql/0020): times in epoch
 * microseconds (the events' own precision), the start its agent_start's (null without one),
 * the end its latest agent_end's (null while none arrived).
 */
const partRow = z
  .object({
    agent_id: z.string(),
    run_id: z.string(),
    first_us: micros,
    last_us: micros,
    start_us: micros.nullable(),
    end_us: micros.nullable(),
    cost_nano: int,
    events: int,
    llm_calls: int,
    tool_calls: int,
    // (models, cost_nano, calls, input_tokens, output_tokens), models sorted
    by_model: z.tuple([z.array(z.string()), z.array(int), z.array(int), z.array(int), z.array(int)]),
  })
  .transform(({ by_model: [models, cost, calls, input, output], ...r }) => ({
    ...r,
    byModel: models.map((model, i) => ({ model, cost_nano: cost[i]!, llm_calls: calls[i]!, input_tokens: input[i]!, output_tokens: output[i]! })),
  }))

export type RunPart = z.output<typeof partRow>
export type ModelSpend = RunPart['byModel'][number]

// Every row of a (user, agent, run) folded into one: the table holds a row per INSERT that
// touched the run until merges fold them. Aliases of their own: ClickHouse would read an
// alias named like a column (first_at) in place of that column inside the other aggregates.
const FOLDED = `toUnixTimestamp64Micro(min(first_at)) AS first_us, toUnixTimestamp64Micro(max(last_at)) AS last_us,
  toUnixTimestamp64Micro(min(start_at)) AS start_us, toUnixTimestamp64Micro(max(end_at)) AS end_us,
  sum(cost_nano) AS cost_nano, sum(events) AS events, sum(llm_calls) AS llm_calls, sum(tool_calls) AS tool_calls,
  sumMap(by_model) AS by_model`

/** The order runs are listed in: by start, then by id; its start is its agent_start's time, else its first event's. */
const STARTED = 'coalesce(min(start_at), min(first_at))'

/** Where a page of an agent's runs starts: after the run started at `startedUs` with id `runId` (in the listing's order). */
export interface RunPosition {
  startedUs: number
  runId: string
}

/**
 * One agent's runs, newest start first, `limit` of them after `after`. The agent's rows are
 * read twice: their start and id only, to choose the page, then every figure of the page's
 * runs only (folding every run's figures to keep 50 took 1.5 times as long: 29 ms against
 * 20 ms for an agent of 10,000 runs).
 */
export function agentRuns(client: ClickHouseClient, q: { userId: string; agentId: string; limit: number; after?: RunPosition }): Promise<RunPart[]> {
  const after = q.after ? 'HAVING (toUnixTimestamp64Micro(started), run_id) < ({after_us:Int64}, {after_run:String})' : ''
  return select(
    client,
    `SELECT agent_id, run_id, ${FOLDED}
     FROM runs
     WHERE user_id = {user:String} AND agent_id = {agent:String}
       AND run_id IN (
         SELECT run_id FROM (
           SELECT run_id, ${STARTED} AS started FROM runs
           WHERE user_id = {user:String} AND agent_id = {agent:String}
           GROUP BY run_id ${after}
           ORDER BY started DESC, run_id DESC LIMIT {limit:UInt32}))
     GROUP BY agent_id, run_id
     ORDER BY coalesce(start_us, first_us) DESC, run_id DESC`,
    { user: q.userId, agent: q.agentId, limit: q.limit, after_us: q.after?.startedUs, after_run: q.after?.runId },
    partRow,
  )
}

/**
 * Every agent's part of one run of a user, by agent id. By the projection of `runs` in
 * (user_id, run_id) order: one granule, not every run of the user.
 */
export function runParts(client: ClickHouseClient, userId: string, runId: string): Promise<RunPart[]> {
  return select(
    client,
    `SELECT agent_id, run_id, ${FOLDED}
     FROM runs
     WHERE user_id = {user:String} AND run_id = {run:String}
     GROUP BY agent_id, run_id
     ORDER BY agent_id`,
    { user: userId, run: runId },
    partRow,
  )
}
