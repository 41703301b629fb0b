-- toolbreaker: compare-and-set of one breaker's state (the Python core decides).
--
-- KEYS[1]  the breaker's state hash: v (version), s (canonical JSON state), a (the
--          instant of the event that wrote it), and while a writer holds the turn, t (its
--          id) and u (server ms at which the turn lapses)
-- ARGV[1]  the version the client computed from; -1 only reads
-- ARGV[2]  the new state's JSON, or '' when the client's transition changed nothing
-- ARGV[3]  time to live in ms; 0 keeps the key forever (an isolated breaker)
-- ARGV[4]  the channel that announces every new version
-- ARGV[5]  the writer's id for this one event
-- ARGV[6]  '1' when the writer lost several times in a row and asks for the turn
-- ARGV[7]  how long a turn lasts, in ms
-- ARGV[8]  '1' on a cluster: announce on the sharded channel too (SPUBLISH), which
--          reaches the subscribers on the slot's master only
-- KEYS[2]  the breaker's history, a stream in the breaker's slot (it shares the hash tag)
-- ARGV[9]  how many entries the history keeps, about (XADD MAXLEN ~)
-- ARGV[10] the instant of the event the new state was computed with
-- ARGV[11...] the transition entries of this write, appended only if the state is written
--          (each with field v: the version it made, which a replay places quiet calls by)
--
-- Reply: {status, version, state, server_ms, at} (at: the instant of the event that wrote
-- the current state, 0 when not known)
--   1  written; version is the new version
--   2  the version matched and there was nothing to write
--   0  conflict: version and state are the current ones (state nil when absent)
--   3  conflict, and the writer now holds the turn: retry at once
--   4  conflict: another writer holds the turn
--   5  the version matched, but the state was written by an event later than ARGV[10]:
--      compute again at that instant (time never goes backwards in a breaker's history)
--
-- The turn is fairness, not a lock: optimistic writers can starve one another under
-- contention, so a writer that lost repeatedly reserves the next write. While its turn
-- lasts (one round trip, never a protected call, and never beyond ARGV[7] ms) other
-- writers get a conflict; reads and no-op checks are never held up.
--
-- A key of another type, or a hash without a whole-number version and a state, is
-- returned as the state '' (which the client loads as corrupt, failing closed) with
-- version 0, and a write replaces it.

local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local owner = ARGV[5]

local version, state, turn, written_at = 0, false, false, 0
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local current = redis.call('HMGET', KEYS[1], 'v', 's', 't', 'u', 'a')
  written_at = tonumber(current[5]) or 0
  local number = tonumber(current[1])
  if number ~= nil and number >= 0 and number == math.floor(number) and current[2] then
    version, state = number, current[2]
  else
    state = ''
  end
  if current[3] and (tonumber(current[4]) or 0) > now_ms then
    turn = current[3]
  end
elseif kind ~= 'none' then
  state = ''
end

local function answer(status, v, s)
  return {status, string.format('%.0f', v), s, now_ms, string.format('%.0f', written_at)}
end

local writing = ARGV[2] ~= ''
local blocked = turn and turn ~= owner
if version ~= tonumber(ARGV[1]) or (writing and blocked) then
  if ARGV[6] == '1' and not turn and kind == 'hash' then
    redis.call('HSET', KEYS[1], 't', owner, 'u', string.format('%.0f', now_ms + tonumber(ARGV[7])))
    return answer(3, version, state)
  end
  return answer(blocked and 4 or 0, version, state)
end

local at = tonumber(ARGV[10]) or 0
if writing and at < written_at then
  return answer(5, version, false)
end

local ttl = tonumber(ARGV[3])
if not writing then
  if kind == 'hash' then
    if turn == owner then redis.call('HDEL', KEYS[1], 't', 'u') end
    if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
  end
  return answer(2, version, false)
end

-- Versions are anchored to the server's clock so they keep growing after a key expired.
local new = string.format('%.0f', math.max(version + 1, now_us))
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 'v', new, 's', ARGV[2], 'a', string.format('%.0f', at))
redis.call('HDEL', KEYS[1], 't', 'u')
if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
-- The history goes in with the state it made, or not at all; it lives as long as the state.
if #ARGV >= 11 then
  for i = 11, #ARGV do
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[9], '*', 'e', ARGV[i], 'v', new)
  end
  if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) else redis.call('PERSIST', KEYS[2]) end
end
-- Classic PUBLISH also on a cluster, for processes of earlier versions (they SUBSCRIBE).
redis.call('PUBLISH', ARGV[4], new .. ' ' .. ARGV[2])
if ARGV[8] == '1' then redis.call('SPUBLISH', ARGV[4], new .. ' ' .. ARGV[2]) end
return {1, new, false, now_ms, string.format('%.0f', at)}
