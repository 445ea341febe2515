import { readFileSync } from 'node:fs'

/**
 * How a Lua script appends to a journal stream (lua/stream.lua: the fence and bound check and
 * the entry's fields), prepended to every script that does: the journal's own append and the
 * hot state's library.
 */
export const STREAM_LUA = readFileSync(new URL('./lua/stream.lua', import.meta.url), 'utf8')
