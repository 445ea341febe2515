-- load: install states as ClickHouse has them, each ONLY IF it is not loaded, so two
-- instances loading at once, or a load racing a record, never count twice: a load replaces
-- a lost state exactly once and never adds on top of live counters. The rules do not run:
-- what a load finds is what was decided, and the next event is judged as usual.
-- K: ids (the partition's event ids, state.lua)
-- A: now, ttl, states: [{key (the state's :s), minutes [[minute, cost, calls]] oldest first,
--   seen [[cost, minute]], fps (the ARGV index of the fingerprint of seen[1]; the others
--   follow), pv, policy (JSON, absent: the default), shown (absent: none), pause {paused,
--   reason ('' while running), override, since}, ignored {since, calls, nano, flagged}
--   (absent: none), alerted [bits…] (per meter of its policy, in order: the levels the
--   loaded spend is at, which count as fired), periods [[tally, from, spent]] (its period
--   budgets' tallies, absent: none), hours (flat [hour, cost, …]: its rolling windows' hours
--   but the newest minute's, absent: none), runs [[id, spent, stopped, last ms]] (absent:
--   none)}]
-- ARGV[2..] the fingerprints of the states' seen ids
-- Returns {installed = [bool…]}, false for a state that was loaded already.
local ids = id_tables()
local installed = {}
for i, s in ipairs(A.states) do
  installed[i] = redis.call('HEXISTS', s.key, 'n') == 0
  if installed[i] then
    local base = string.sub(s.key, 1, -3)
    local pause = NOT_PAUSED
    if s.pause.paused or s.pause.override then pause = s.pause end
    local st = { s = s.key, w = base .. ':w', d = base .. ':d', raw = false, from = DAY_FROM, total = 0, calls = 0, cm = 0, cc = 0, cn = 0, pv = s.pv,
      held = 0, holds = false, pause = pause, ign = s.ignored or NO_IGNORED, alerted = s.alerted, tallies = {}, windows = {} }
    -- Leftovers of a partly expired state (and its holds, which counted in the state lost)
    -- must not add to what is loaded. The tallies start from the buckets when first read.
    redis.call('DEL', st.s, st.w, st.d, base .. ':hz', base .. ':h', base .. ':r', base .. ':rz', base .. ':rh')
    for _, b in ipairs(s.minutes) do
      if b[1] >= DAY_FROM then add(st, b[1], b[2], b[3]) end
    end
    -- Ids the partition still remembers (the state's keys expired before its ids) stay as they are.
    for k, seen in ipairs(s.seen) do
      local fp = ARGV[s.fps + k - 1]
      local h = h32(fp)
      if seen[2] >= DAY_FROM and not seen_cost(ids, fp, h) then remember(ids, fp, h, fmt(seen[1]), seen[2]) end
    end
    -- The periods' tallies as the caller summed them (the minutes above included), set after
    -- the minutes so that add() does not count those twice.
    for _, p in ipairs(s.periods or {}) do st.tallies[p[1]] = { from = p[2], spent = p[3] } end
    if s.hours and #s.hours > 0 then
      redis.call('HSET', st.d, unpack(s.hours))
      st.windows.rolling = true
    end
    -- The runs kept for a run budget: [[id, spent, stopped (0/1), last (ms)]].
    if s.runs and #s.runs > 0 then
      run_keys(st)
      for _, r in ipairs(s.runs) do
        redis.call('HSET', st.r, r[1], fmt(r[2]) .. ' ' .. r[3] .. ' ' .. fmt(r[4]))
        redis.call('ZADD', st.rz, r[4], r[1])
      end
      redis.call('PEXPIRE', st.r, TTL)
      redis.call('PEXPIRE', st.rz, TTL)
    end
    save_state(st)
    if s.pv > 0 then redis.call('HSET', st.s, 'policy', s.policy, 'shown', s.shown) end
    touch(st)
  end
end
save_ids(ids)
return cjson.encode({ installed = installed })
