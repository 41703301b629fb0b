"""The Redis store's server side: Lua scripts, their arguments and replies, a pipeline.

The compare-and-set of a breaker's state is ``cas.lua`` (read by :func:`cas_source`):
it writes the state the Python core computed only if the version it was computed from is
still current, and keeps a short *turn* so that a writer that lost repeatedly is not
starved. The other scripts below are one atomic step each: the journal, records, and the
refresh of a viewed key's time to live. :class:`Batch` sends the asyncio round trips of
one event loop that are due together as few pipelines.
"""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any, Final, NamedTuple

from toolbreaker._extras import require
from toolbreaker.stores._shell import Reply

__all__ = [
    "HISTORY_APPEND",
    "JOURNAL_ALL",
    "JOURNAL_PUT",
    "MY_TURN",
    "RECORD_APPEND",
    "RECORD_DELETE",
    "RECORD_LOG_READ",
    "RECORD_PUT",
    "REFRESH_TTL",
    "THEIR_TURN",
    "TURN_MS",
    "Args",
    "Batch",
    "cas_source",
    "parse_reply",
    "redis_module",
]

#: A conflict, and the writer now holds the turn: try again at once.
MY_TURN: Final = 3
#: A conflict: another writer holds the turn.
THEIR_TURN: Final = 4
#: How long a starving writer's reserved turn lasts at most (ms).
TURN_MS: Final = 25
_SCRIPT_FILE: Final = "cas.lua"
#: Keep a viewed breaker's key alive (an idle one expires), and its history with it.
REFRESH_TTL: Final = """
if redis.call('PTTL', KEYS[1]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
if KEYS[2] and redis.call('PTTL', KEYS[2]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end
return 1
"""
#: Append one entry to a breaker's history, no state change (the quiet counts no write
#: carried); the stream lives as long as the state (an idle breaker's for ``ARGV[3]`` ms).
HISTORY_APPEND: Final = """
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'e', ARGV[2])
local ttl = redis.call('PTTL', KEYS[2])
if ttl == -1 then redis.call('PERSIST', KEYS[1])
elseif ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl)
else redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return 1
"""
#: Write one journal entry (only if new, with ``ARGV[3] == '1'``) and keep its order.
JOURNAL_PUT: Final = """
local written
if ARGV[3] == '1' then
  written = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
  if written == 0 then return 0 end
else
  written = redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
if written == 1 then redis.call('RPUSH', KEYS[2], ARGV[1]) end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return 1
"""


# Records: one hash per space, ``field = key``, ``value = "<version> <json>"``. One key per
# space keeps a space in one slot (its name is the hash tag) and makes a list one HGETALL.
# The entries appended to a record (RecordLog) are a list, ``KEYS[2]``, of
# ``"<version> <json>"`` in the record's slot. An append leaves the record as written: the
# version it makes goes in the field ``ARGV[2]`` beside it (``"\0<key>"``: no key is
# unprintable), which holds the record's version while it has entries; writing or
# removing the record drops both. Each script below starts with _VERSION: the record's
# version now (``nil``: absent), or -1 for a value that does not validate.
_VERSION: Final = """
local beside = redis.call('HGET', KEYS[1], ARGV[2])
local version = nil
if beside then
  if not string.match(beside, '^[1-9]%d*$') then return -1 end
  if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
  version = tonumber(beside)
else
  local cur = redis.call('HGET', KEYS[1], ARGV[1])
  if cur then
    version = tonumber(string.match(cur, '^(%d+) '))
    if version == nil then return -1 end
  end
end
"""
#: Compare-and-set one record (``ARGV[3]``, at version ``ARGV[4]``, empty: any): the new
#: version, 0 on a mismatch, -1 for a bad value. Its entries are dropped.
RECORD_PUT: Final = (
    _VERSION
    + """
local now = version or 0
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= now then return 0 end
now = now + 1
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now) .. ' ' .. ARGV[3])
if beside then redis.call('HDEL', KEYS[1], ARGV[2]) end
redis.call('DEL', KEYS[2])
return now
"""
)
#: Append one entry (``ARGV[3]``) if the record is at version ``ARGV[4]``: the new
#: version, 0 on a mismatch or an absent record, -1 for a bad value. The record as
#: written is not read (once it has entries) nor rewritten.
RECORD_APPEND: Final = (
    _VERSION
    + """
if version == nil or tonumber(ARGV[4]) ~= version then return 0 end
local made = string.format('%.0f', version + 1)
redis.call('HSET', KEYS[1], ARGV[2], made)
redis.call('RPUSH', KEYS[2], made .. ' ' .. ARGV[3])
return version + 1
"""
)
#: A record, the version beside it (``false``: none) and its entries in one atomic read;
#: an empty reply when it is absent.
RECORD_LOG_READ: Final = """
local found = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[2])
if not found[1] then return {} end
return {found[1], found[2], redis.call('LRANGE', KEYS[2], 0, -1)}
"""
#: Remove one record and its entries if its version matches (``ARGV[3]``, empty: any):
#: 1 if removed, 0 if not, -1 for a bad value. Removing at any version reads no version,
#: so a record whose value does not validate can be removed (and replaced: what
#: ``policy publish --over-corrupt`` does).
RECORD_DELETE: Final = (
    """
if ARGV[3] == '' then
  local removed = redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('DEL', KEYS[2])
  return removed
end
"""
    + _VERSION
    + """
if version == nil then return 0 end
if ARGV[3] ~= '' and tonumber(ARGV[3]) ~= version then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[2])
return 1
"""
)


# Both keys share the task's hash tag: one slot, one atomic read (also on a cluster).
#: Every entry of a task's journal, with their order, in one atomic read.
JOURNAL_ALL: Final = """
return {redis.call('LRANGE', KEYS[2], 0, -1), redis.call('HGETALL', KEYS[1])}
"""


def cas_source() -> str:
    """The text of the compare-and-set script."""
    return resources.files(__package__).joinpath(_SCRIPT_FILE).read_text("utf-8")


class Args(NamedTuple):
    """The arguments of one run of the compare-and-set script (see ``cas.lua``)."""

    key: str
    expected: int
    payload: str
    ttl_ms: int
    channel: str
    writer: str = ""
    reserve: bool = False
    sharded: bool = False  # on a cluster: announce with SPUBLISH too
    history_key: str = ""
    history_keep: int = 0
    history: tuple[str, ...] = ()
    at: int = 0

    def keys(self) -> list[str]:
        """``KEYS``: the state and the history (one hash tag: one slot)."""
        return [self.key, self.history_key]

    def argv(self) -> list[str | int]:
        """``ARGV`` in the script's order."""
        return [
            self.expected,
            self.payload,
            self.ttl_ms,
            self.channel,
            self.writer,
            "1" if self.reserve else "0",
            TURN_MS,
            "1" if self.sharded else "0",
            self.history_keep,
            self.at,
            *self.history,
        ]


def redis_module() -> Any:
    """The ``redis`` package, imported on first use (it is the ``redis`` extra).

    Raises:
        MissingExtra: the extra is not installed.
    """
    return require("redis", "redis", what="a Redis store")


def parse_reply(reply: object) -> tuple[Reply, int]:
    """The script's reply and the server's time in ms; anything else is a store fault."""
    if not isinstance(reply, list) or len(reply) != 5:
        raise ValueError(reply)
    status, version, state, server_ms, written_at = reply
    if status not in (0, 1, 2, 3, 4, 5) or not isinstance(server_ms, int):
        raise ValueError(reply)
    number, at = int(version), int(written_at)  # bytes of digits, or ValueError
    if number < 0 or at < 0 or (state is not None and not isinstance(state, bytes)):
        raise ValueError(reply)
    return Reply(status, number, state, at), server_ms


#: How many callers of a batch are woken per turn of the event loop.
_WAKE = 16
#: The most scripts one pipeline carries (a batch of more is sent as several).
_PIPELINE = 32


class Batch:
    """The asyncio round trips of one event loop that are due together, as few pipelines.

    A task's script call joins the batch of the loop's current iteration; the batch is
    sent once every task made ready in that iteration has had its turn. Two hundred
    breakers settling at once cost one pipeline (one write, one read loop) instead of two
    hundred commands, each with its own connection checkout, timeout and parse: the loop
    stays responsive when a slow store answers many calls at the same moment. Each
    script is still one atomic compare-and-set; a failed send fails every call in it.
    """

    __slots__ = ("_client", "_pending", "_script", "_sending")

    def __init__(self, client: Any, script: Any) -> None:
        self._client = client
        self._script = script
        self._pending: list[tuple[Args, asyncio.Future[object]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, args: Args) -> object:
        """Run the script with ``args`` in the next pipeline; its raw reply.

        Raises:
            redis.RedisError, OSError: the pipeline could not be sent or read.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._pending.append((args, future))
        if len(self._pending) == 1:
            loop.call_soon(self._flush)
        reply = await future
        if isinstance(reply, _Failed):
            raise reply.error
        return reply

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        # Pipelines of at most _PIPELINE scripts, on connections of their own: a crowd of
        # replies is parsed in several turns of the loop, not all in one.
        for start in range(0, len(batch), _PIPELINE):
            task = asyncio.ensure_future(self._send(batch[start : start + _PIPELINE]))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[Args, asyncio.Future[object]]]) -> None:
        try:
            replies = await self._pipeline([args for args, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - every caller gets its own copy
            replies = [_Failed(exc)] * len(batch)
        for start in range(0, len(batch), _WAKE):
            if start:
                # The callers woken so far run before the next slice is woken: the loop
                # takes its timers and I/O between slices, not after all of them.
                await asyncio.sleep(0)
            for (_, future), reply in zip(
                batch[start : start + _WAKE], replies[start : start + _WAKE], strict=True
            ):
                if not future.done():  # a caller cancelled meanwhile is not answered
                    future.set_result(reply)

    async def _pipeline(self, batch: list[Args]) -> list[object]:
        """Every script's reply (or error) in order.

        Scripts the server did not know (first use, a restart, ``SCRIPT FLUSH``) never
        ran: the script is loaded and they are sent once more.
        """
        replies: list[object] = [None] * len(batch)
        todo = list(range(len(batch)))
        for attempt in range(2):
            pipe = self._client.pipeline(transaction=False)
            for index in todo:
                args = batch[index]
                pipe.evalsha(self._script.sha, 2, *args.keys(), *args.argv())
            answers = await pipe.execute(raise_on_error=False)
            missing = []
            for index, answer in zip(todo, answers, strict=True):
                if attempt == 0 and _no_script(answer):
                    missing.append(index)
                else:
                    replies[index] = _Failed(answer) if isinstance(answer, Exception) else answer
            if not missing:
                break
            await self._client.script_load(self._script.script)
            todo = missing
        return replies


class _Failed:
    """A batched call's error, handed to its caller to raise."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _no_script(answer: object) -> bool:
    return isinstance(answer, redis_module().exceptions.NoScriptError)
