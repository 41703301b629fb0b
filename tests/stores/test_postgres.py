"""The PostgreSQL store against a real server: the conformance suite, and what a server does."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest
from conformance import (
    HANG_GUARD,
    POLICY,
    AmbiguousWriteContract,
    RecordsContract,
    RoundTripContract,
    StoreContract,
    Twin,
    closed_port,
    fork_and_check,
    wait_for,
    without_hanging,
)
from patient import patient_postgres

from lag_proxy import LaggingProxy
from ports import free_port

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")

from toolbreaker import Breaker, Policy  # noqa: E402
from toolbreaker.core import Event  # noqa: E402
from toolbreaker.core._breaker.state import CORRUPT  # noqa: E402
from toolbreaker.errors import (  # noqa: E402
    PolicyError,
    StoreUnavailable,
)
from toolbreaker.stores import PostgresStore  # noqa: E402


@pytest.fixture
def client(postgres_url):
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


def statements(conn) -> int:
    """Compare-and-set statements the server ran (pg_stat_statements counts at once)."""
    row = conn.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE %s",
        ("%toolbreaker_cas_history(%",),
    ).fetchone()
    return int(row[0])


def fed(store: PostgresStore, key: str, policy: Policy = POLICY):
    view = store.view(key)

    def trusted() -> bool:
        store.load(key, policy)
        return view.state is not None

    wait_for(trusted)
    return view


class TestPostgresStore(StoreContract, RecordsContract, AmbiguousWriteContract, RoundTripContract):
    @pytest.fixture
    def counted(self, postgres_bindir):
        """A store on a server of the test's own (with pg_stat_statements), and its count
        of compare-and-set statements run."""
        from stores.conftest import PostgresServer

        server = PostgresServer(
            postgres_bindir, "-c", "shared_preload_libraries=pg_stat_statements"
        )
        server.start()
        try:
            with psycopg.connect(server.url, autocommit=True) as client:
                client.execute("CREATE EXTENSION pg_stat_statements")
                with patient_postgres(server.url) as store:
                    yield store, lambda: statements(client)
        finally:
            server.remove()

    @pytest.mark.slow  # a server of its own
    def test_round_trips_per_call(self, counted):
        super().test_round_trips_per_call(counted)

    @pytest.fixture
    def store(self, postgres_url):
        with patient_postgres(postgres_url) as store:
            yield store

    @pytest.fixture
    def lagging(self, postgres_server):
        @contextlib.contextmanager
        def through(pattern: str):
            with LaggingProxy(postgres_server.port, pattern.encode()) as proxy:
                url = f"postgresql://postgres@127.0.0.1:{proxy.port}/postgres"
                with PostgresStore(url, timeout=0.2) as store:
                    yield store, proxy

        return through

    @pytest.fixture
    def refused(self):
        url = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
        with PostgresStore(url, timeout=0.2, backoff=0.0) as store:
            yield store

    @pytest.fixture
    def twin(self, postgres_url):
        with patient_postgres(postgres_url) as twin:
            yield twin

    def write_raw(self, store, key, raw, policy):
        store.load(key, policy)  # creates the tables
        with psycopg.connect(store.conninfo, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO toolbreaker_breakers (key, version, state) VALUES (%s, 7, %s) "
                "ON CONFLICT (key) DO UPDATE SET version = 7, state = excluded.state",
                (key, raw),
            )

    async def close_async(self, store):
        await store.aclose()


def test_options_are_validated(postgres_url):
    for bad in ({"timeout": 0}, {"max_attempts": 0}, {"prefix": "Bad-Prefix"}, {"prefix": ""}):
        with pytest.raises(PolicyError):
            PostgresStore(postgres_url, **bad)


def test_an_unreachable_server_is_unavailable_fast_and_denies():
    """Nothing listening: StoreUnavailable at once; the breaker denies as store-unavailable.

    "At once" without a clock: the store's timeout (and so its connect timeout) is longer
    than the hang guard, so a store that waited it out or retried would fail the guard."""
    port = free_port()
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    with PostgresStore(url, backoff=0, timeout=2 * HANG_GUARD) as store:
        with pytest.raises(StoreUnavailable):
            without_hanging(lambda: store.apply("k", Event("request", 0, "k", call="a"), POLICY))
        with pytest.raises(StoreUnavailable):
            without_hanging(lambda: store.load("k", POLICY))
        rejection = Breaker("k", store=store, timeout=1).allow()
        assert not rejection.admitted
        assert rejection.reason == "store-unavailable"


@pytest.mark.slow
def test_a_stopped_server_denies_and_a_restarted_one_is_used_again(private_postgres):
    """Server down: calls denied as store-unavailable. Server back: admitted, no restart."""
    with patient_postgres(private_postgres.url) as store:
        breaker = Breaker("search", store=store, timeout=1, enforce="cooperative")
        wait_for(lambda: breaker.allow().admitted and breaker._view.state is not None)
        private_postgres.kill()
        wait_for(lambda: breaker._view.state is None)
        for _ in range(3):
            rejection = breaker.allow()
            assert not rejection.admitted
            assert rejection.reason == "store-unavailable"
        private_postgres.start()

        def works() -> bool:
            permit = breaker.allow()
            if permit.admitted:
                permit.record("success")
            return permit.admitted

        wait_for(works)
        wait_for(lambda: breaker.allow().admitted and breaker._view.state is not None)


@pytest.mark.slow
def test_a_frozen_server_fails_closed_within_a_bound_and_recovers(private_postgres):
    """The server accepts TCP and its kernel acknowledges data, but nothing answers
    (SIGSTOPped), so no server-side timeout can fire: the listener stops trusting its
    views, a sync call fails closed with StoreUnavailable in bounded time, and once the
    server thaws the same store works and trusts its views again."""
    key, quiet = f"dep-{uuid.uuid4().hex[:8]}", f"quiet-{uuid.uuid4().hex[:8]}"
    with PostgresStore(private_postgres.url, timeout=1.0, backoff=0, ping_interval=0.2) as store:
        watched = Breaker(quiet, store=store, timeout=1, enforce="cooperative")
        wait_for(lambda: watched.allow().admitted and watched._view.state is not None)
        private_postgres.freeze()
        try:
            wait_for(lambda: watched._view.state is None)  # the listener
            # The server stays frozen until the test thaws it: a call that returns at all,
            # and with this error, did not block until the thaw (as it once did).
            with pytest.raises(StoreUnavailable, match="did not answer"):
                without_hanging(
                    lambda: store.apply(
                        key, Event("failure", 1, key, call="a", generation=0), POLICY
                    )
                )
            rejection = watched.allow()
            assert not rejection.admitted
            assert rejection.reason == "store-unavailable"
            with pytest.raises(StoreUnavailable):
                store.record_put("s", key, {"n": 1})
        finally:
            private_postgres.thaw()
        wait_for(lambda: watched.allow().admitted and watched._view.state is not None)
        assert store.record_put("s", key, {"n": 1}) is not None


def test_a_slow_statement_is_cancelled_and_unavailable(postgres_url, client):
    """A row locked by someone else past the timeout: StoreUnavailable, then it recovers.

    A bound of 1 s, not the default 0.25 s: the statements around the locked one must
    answer within it on a loaded machine too, and the lock outlasts any bound."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with PostgresStore(postgres_url, backoff=0, timeout=1.0) as store:
        store.apply(key, Event("request", 0, key, call="a"), POLICY)
        store.apply(key, Event("failure", 1, key, call="a", generation=0), POLICY)
        with client.transaction():
            client.execute("SELECT 1 FROM toolbreaker_breakers WHERE key = %s FOR UPDATE", (key,))
            with pytest.raises(StoreUnavailable):
                store.apply(key, Event("failure", 2, key, call="b", generation=0), POLICY)
        state, _ = store.apply(key, Event("failure", 3, key, call="c", generation=0), POLICY)
        assert len(state.failures) == 2


def test_a_lost_listener_empties_views_until_confirmed_again(postgres_url, client):
    """Terminating the listening backend drops the views; they come back by themselves."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with patient_postgres(postgres_url) as store:
        view = fed(store, key)
        client.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'toolbreaker-listener'"
        )
        wait_for(lambda: view.state is None)
        fed(store, key)


def test_a_big_state_reaches_views_through_a_read(postgres_url):
    """A state too big for a notification is read by the listener instead."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    policy = Policy(failure_threshold=2000, window_ms=10**9)
    with patient_postgres(postgres_url) as store, patient_postgres(postgres_url) as other:
        view = fed(store, key, policy)
        for n in range(1000):  # well over the 7000 bytes sent inline
            other.apply(key, Event("failure", 10**9 + n, key, call=f"c{n}", generation=0), policy)
        wait_for(lambda: view.state is not None and len(view.state.failures) == 1000)


def test_aapply_does_not_block_the_loop(postgres_url, client):
    """While a row lock makes aapply wait, other tasks on the loop keep running."""
    key = f"dep-{uuid.uuid4().hex[:8]}"

    async def main() -> tuple[int, bool]:
        with PostgresStore(postgres_url, timeout=0.5, backoff=0) as store:
            try:
                await store.aapply(key, Event("request", 0, key, call="a"), POLICY)
                await store.aapply(key, Event("failure", 1, key, call="a", generation=0), POLICY)
                ticks = 0

                async def heartbeat() -> None:
                    nonlocal ticks
                    while True:
                        await asyncio.sleep(0.01)
                        ticks += 1

                beat = asyncio.create_task(heartbeat())
                with client.transaction():
                    client.execute(
                        "SELECT 1 FROM toolbreaker_breakers WHERE key = %s FOR UPDATE", (key,)
                    )
                    try:
                        await store.aapply(
                            key, Event("failure", 2, key, call="b", generation=0), POLICY
                        )
                        failed = False
                    except StoreUnavailable:
                        failed = True
                beat.cancel()
                return ticks, failed
            finally:
                await store.aclose()

    ticks, failed = asyncio.run(main())
    assert failed  # the lock outlived the timeout: fail closed
    assert ticks >= 5  # the heartbeat ran while aapply waited


def test_a_forked_child_trusts_no_inherited_view(postgres_url):
    """After fork, the child's views are empty and it still works on its own connection."""
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with patient_postgres(postgres_url) as store:
        view = fed(store, key)

        def check() -> bool:
            if view.state is not None:
                return False
            store.apply(key, Event("request", 5, key, call="child"), POLICY)
            return store.load(key, POLICY).phase == "closed"

        assert fork_and_check(check) == 0
        store.apply(key, Event("request", 6, key, call="parent"), POLICY)


def test_a_corrupt_row_loads_open(postgres_url):
    key = f"dep-{uuid.uuid4().hex[:8]}"
    with patient_postgres(postgres_url) as store:
        TestPostgresStore().write_raw(store, key, "{nope", POLICY)
        assert store.load(key, POLICY) == CORRUPT


# -- the journal ------------------------------------------------------------------------


def test_the_journal_is_durable_and_refused_on_a_server_without_fsync(postgres_bindir):
    """fsync = off: JournalNotDurable unless volatile_journal=True."""
    from stores.conftest import PostgresServer
    from toolbreaker.errors import JournalNotDurable

    server = PostgresServer(postgres_bindir, "-c", "fsync=off")
    server.start()
    try:
        with patient_postgres(server.url) as store:
            assert not store.journal_durable()
            with pytest.raises(JournalNotDurable, match="fsync"):
                store.journal_put("t", "k", {"status": "pending"})
        with patient_postgres(server.url, volatile_journal=True) as store:
            assert store.journal_put("t", "k", {"status": "pending"})
    finally:
        server.remove()


@pytest.mark.slow
def test_a_confirmed_journal_entry_survives_a_killed_server(private_postgres):
    """SIGKILL every server process after a confirmed write; restarted, the entry is there."""
    with patient_postgres(private_postgres.url, backoff=0) as store:
        assert store.journal_durable()
        task = f"task-{uuid.uuid4().hex[:8]}"
        entry = {"status": "confirmed", "tool": "refund"}
        assert store.journal_put(task, "r-1", entry)
        private_postgres.kill()
        private_postgres.start()

        def read():
            try:
                return store.journal_get(task, "r-1")
            except StoreUnavailable:
                return None

        wait_for(lambda: read() == entry)


def test_an_operators_hand_edit_reaches_every_view(postgres_url, client):
    """A row changed outside the store (an UPDATE by hand) is notified by the trigger."""
    from toolbreaker.stores._views import encode_state

    key = f"dep-{uuid.uuid4().hex[:8]}"
    with patient_postgres(postgres_url) as store:
        Twin(store, key, POLICY).trip()
        opened = store.load(key, POLICY)
        view = fed(store, key)
        closed = Twin(store, key, POLICY)
        client.execute(
            "UPDATE toolbreaker_breakers SET version = version + 1, state = %s WHERE key = %s",
            (encode_state(closed.state), key),
        )
        wait_for(lambda: view.state is not None and view.state != opened)
        assert view.state.phase == "closed"
        client.execute("DELETE FROM toolbreaker_breakers WHERE key = %s", (key,))
        wait_for(lambda: view.known == closed.state and view.version == 0)


# -- records ------------------------------------------------------------------------------


def test_records_on_an_unreachable_server_are_unavailable():
    """Every record operation fails closed with StoreUnavailable."""
    port = free_port()
    with PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/postgres", backoff=0) as store:
        for call in (
            lambda: store.record_get("s", "k"),
            lambda: store.record_put("s", "k", {}),
            lambda: store.record_delete("s", "k"),
            lambda: store.record_list("s"),
        ):
            with pytest.raises(StoreUnavailable):
                call()


def test_a_corrupt_record_fails_closed(postgres_url, client):
    """A record row that does not validate (bad JSON, bad version): StoreUnavailable."""
    space = f"s-{uuid.uuid4().hex[:8]}"
    with patient_postgres(postgres_url) as store:
        store.record_put(space, "json", {"ok": 1})
        store.record_put(space, "version", {"ok": 1})
        client.execute(
            "UPDATE toolbreaker_records SET value = '{nope' WHERE space = %s AND key = 'json'",
            (space,),
        )
        client.execute(
            "UPDATE toolbreaker_records SET version = 0 WHERE space = %s AND key = 'version'",
            (space,),
        )
        for key in ("json", "version"):
            with pytest.raises(StoreUnavailable):
                store.record_get(space, key)
        with pytest.raises(StoreUnavailable):
            store.record_list(space)
