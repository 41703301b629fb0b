"""The Redis store: breaker state shared by processes and hosts, one round trip per change.

Needs the ``redis`` extra (``pip install '.[redis]'``); ``redis`` is imported
only when a :class:`RedisStore` is built.

How a transition happens. The Python core decides; Redis only guards the write. Each
breaker is one hash ``<prefix>:{<key>}:state`` holding its canonical JSON state and an
integer version. To apply an event the store takes the state it last saw (its view), lets
:func:`~toolbreaker.core.apply` compute the result, and sends one script (``cas.lua``)
that writes the result only if the version is still the one it computed from, refreshes
the key's time to live and publishes the new version on ``<prefix>:{<key>}:events``. On a
conflict the script returns the current state and the store computes again (bounded, then
:class:`~toolbreaker.errors.StoreUnavailable`): the compare-and-set loop every store of
this kind shares (:class:`~toolbreaker.stores._shell.CompareAndSetStore`). So a change
costs one round trip when the view is current, nothing is read and written across round
trips without a version check, and no lock is ever held, let alone while a protected call
runs. Both keys of a breaker share one hash tag, so every script touches one slot, as
Redis Cluster requires.

Views. A feed thread per store subscribes to the events of every viewed key and keeps the
views current, so the runtime's fast path admits calls in a quiet closed state and rejects
them while open without a round trip, and an opening or an operator's release reaches
every process as soon as Redis delivers the message. A view is a lease: trusted until
``view_lease`` seconds (1 s) after the server last answered the feed's ping (sent every
``view_lease / 4`` seconds), so a server that dies or freezes is noticed by every call
within that bound, whatever the feed has noticed. When the subscription is lost every
view is emptied (calls ask the store again) until the feed has resubscribed and a round
trip has confirmed the state. On a cluster the feed holds one
sharded subscription (``SSUBSCRIBE``) per master, for the channels of that master's
slots: losing a master (killed, silent past a ping, or its slot moved away) empties the
views of exactly those slots, so no call is admitted on a view of a slot without a
master, and they are trusted again once the promoted replica confirmed the subscription.
Keep ``ping_interval`` plus the ping's wait well below ``cluster-node-timeout``, so that a
frozen master is noticed before its replica can take writes.

Time. Events must carry one clock for all hosts. :meth:`RedisStore.clock` is the Redis
server's clock as seen from this process (an offset to the local monotonic clock, learned
from the server's ``TIME`` on each round trip, that never goes backwards); use it as the
breakers' clock::

    store = RedisStore("redis://cache:6379/0")
    registry = Registry(store=store, clock=store.clock)

Fail closed. A refused connection, a timeout (``socket_timeout``, 0.25 s by default) or a
reply that does not validate raises ``StoreUnavailable``: the breaker denies the call with
the reason ``store-unavailable``. A journal or record write whose request may have
reached the server before it failed (a timeout waiting for the reply) raises its
subclass ``StoreWriteUnknown``: the write may have been made. A stored state that does
not validate loads as the core's recovered-from-corruption open state. A server that
comes back is used again without a restart. Idle breakers expire after ``idle_ttl``
(never an isolated one, and never one a process still views: the feed refreshes those),
and probe leases carry their owner and admission time, so a crashed worker cannot leave
a breaker half-open forever.

Records (``Records``). One hash per space,
``<prefix>:{records:<space>}:records``, maps each key to ``"<version> <json>"``; a
compare-and-set is one script on that hash. The space is the hash tag, so on a cluster a
whole space lives in one slot and listing it is one ``HGETALL`` on one node. A space that
carries a hash tag of its own (a breaker's, ``bulkhead/{<key>}``) is the hash
``<prefix>:<space>:records``: it lives in the slot of that breaker's state. The entries
appended to a record (:class:`~toolbreaker.stores._protocol.RecordLog`) are the list
``<hash>:log:<key>`` beside it (the same slot), each ``"<version> <json>"``. An append is
one script that pushes the entry and keeps the version it made in the hash's field
``"<NUL><key>"`` (no key is unprintable), so it never reads or rewrites the record as
written, however large; a read, a list and a compare-and-set take the version there while
the field exists (``HMGET``, ``HGETALL``: one round trip, one slot), and a write or a
removal of the record drops the field and the list in its own script. Records never
expire (a lease carries its own end) and follow the server's persistence settings.

Modules: ``_store`` (:class:`RedisStore`: round trips, journal, records, the server's
clock), ``_script`` (the Lua scripts, their arguments and replies, the asyncio pipeline)
and ``_feeds`` (the subscriptions that keep the views current).
"""

from toolbreaker.stores._redis._store import RedisStore

__all__ = ["RedisStore"]
