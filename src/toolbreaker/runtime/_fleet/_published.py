"""Published boundary sheets: one record per sheet name, written by compare-and-set.

A published sheet is a record in the store's ``toolbreaker.policy`` space (see
``Records``): the sheet's TOML text, its SHA-256, a revision
that grows by one per publication, and who published it, when, and why. Publishers
write by compare-and-set on the record's version, so two publishers at once both land,
one after the other, with two revisions; neither is lost.

Followers (:class:`PolicyFollower`) poll the record on a thread (jittered), validate a
new revision exactly as :meth:`~toolbreaker.Registry.from_toml` validates a file, and
hand it to their registry. A revision that does not validate, or a record that does not
decode (the store answered with bytes that are no record), is refused: the follower
keeps the last revision it validated, counts the refusal and logs it (masked). A store
that cannot be read changes nothing either; that is counted as a read error.

A record that does not decode is never overwritten by accident: a publisher replaces it
only when told to (``over_corrupt``, the operator's reason, kept in the new record beside
who and when), by compare-and-set on the garbled record's version, with a revision above
any it could have held.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final

from toolbreaker.core._files import shown
from toolbreaker.errors import PolicyError, RecordCorrupt, StoreUnavailable
from toolbreaker.runtime._log import hook_failed, log
from toolbreaker.stores._protocol import Records

__all__ = [
    "POLICY_SCHEMA",
    "POLICY_SPACE",
    "PolicyFollower",
    "PublishedSheet",
    "published_by",
    "read_published",
    "write_published",
]

#: The record space published sheets live in.
POLICY_SPACE: Final = "toolbreaker.policy"
#: The schema of a published sheet record.
POLICY_SCHEMA: Final = "toolbreaker.policy/v1"
#: How many times a publisher retries a compare-and-set another publisher won.
_PUBLISH_ATTEMPTS: Final = 64
#: What a follower remembers it saw of a record that does not decode.
_GARBLED: Final = object()
#: The shortest and longest poll interval a follower accepts, in seconds.
MIN_POLL_S: Final = 0.05
MAX_POLL_S: Final = 3600.0


@dataclasses.dataclass(frozen=True, slots=True)
class PublishedSheet:
    """One published revision of a boundary sheet.

    Attributes:
        name: the sheet's name in the store (``default`` unless given).
        revision: grows by one per publication of this name, from 1.
        sha256: the SHA-256 of ``text`` (UTF-8), hex.
        text: the sheet's TOML text, as published.
        published_at: when, as an ISO 8601 UTC time.
        published_by: who (``user@host`` unless the publisher said otherwise).
        note: the publisher's note, if any.
        record_version: the store record's version (changes on every write).
        over_corrupt: the operator's reason, when this revision replaced a record that
            did not decode.
    """

    name: str
    revision: int
    sha256: str
    text: str
    published_at: str
    published_by: str
    note: str | None
    record_version: int
    over_corrupt: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The revision without its text, JSON-ready (what ``policy show --json`` prints)."""
        return {
            "name": self.name,
            "revision": self.revision,
            "sha256": self.sha256,
            "published_at": self.published_at,
            "published_by": self.published_by,
            "note": self.note,
            "over_corrupt": self.over_corrupt,
            "bytes": len(self.text.encode("utf-8")),
        }


def published_by() -> str:
    """``user@host`` of this process, as far as it can tell."""
    import getpass  # a publication's: no registry loads socket for this
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name is not an error here
        user = "unknown"
    return f"{user}@{socket.gethostname() or 'unknown'}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _decode(name: str, value: Mapping[str, Any], version: int) -> PublishedSheet:
    """A record as a revision; anything malformed is a PolicyError (refused)."""
    if value.get("schema") != POLICY_SCHEMA:
        raise PolicyError(f"published sheet {name!r}: not a {POLICY_SCHEMA} record")
    revision, text, digest = value.get("revision"), value.get("sheet"), value.get("sha256")
    if type(revision) is not int or revision < 1:
        raise PolicyError(f"published sheet {name!r}: bad revision {shown(revision)}")
    if not isinstance(text, str) or not isinstance(digest, str):
        raise PolicyError(f"published sheet {name!r}: no sheet text or digest")
    if _sha256(text) != digest:
        raise PolicyError(
            f"published sheet {name!r} revision {revision}: the text does not match its sha256"
        )
    at, by, note = value.get("published_at"), value.get("published_by"), value.get("note")
    over = value.get("over_corrupt")
    return PublishedSheet(
        name=name,
        revision=revision,
        sha256=digest,
        text=text,
        published_at=at if isinstance(at, str) else "",
        published_by=by if isinstance(by, str) else "",
        note=note if isinstance(note, str) else None,
        record_version=version,
        over_corrupt=over if isinstance(over, str) else None,
    )


def _corrupt(name: str, exc: RecordCorrupt) -> PolicyError:
    at = f" (record version {exc.version})" if exc.version is not None else ""
    return PolicyError(
        f"published sheet {name!r} does not decode{at}: replace it with a valid revision "
        "by toolbreaker policy publish SHEET --over-corrupt REASON (or publish_policy(..., "
        "over_corrupt=REASON)); who and why are recorded",
        field="over-corrupt",
    )


def read_published(store: Records, name: str = "default") -> PublishedSheet | None:
    """The current revision of sheet ``name``, or ``None`` when none was published.

    Only the record is checked here (schema, digest); the sheet itself is validated by
    whoever builds a registry from it.

    Raises:
        StoreUnavailable: the store could not be read.
        PolicyError: the record does not decode as a published sheet (or at all).
    """
    try:
        found = store.record_get(POLICY_SPACE, name)
    except RecordCorrupt as exc:
        raise _corrupt(name, exc) from None
    if found is None:
        return None
    return _decode(name, found[0], found[1])


def write_published(
    store: Records,
    text: str,
    *,
    name: str = "default",
    note: str | None = None,
    by: str | None = None,
    over_corrupt: str | None = None,
) -> PublishedSheet:
    """Publish ``text`` (already validated) as the next revision of ``name``.

    Compare-and-set on the record's version: a publisher that lost the race reads the
    winner's revision and tries again, so every publication lands with its own revision.
    A record that does not decode is replaced only with ``over_corrupt`` (the reason,
    kept in the new record), and then only that record: by its version when the store
    can read it, its version + 1 becoming the revision (no revision it held was higher).

    Raises:
        StoreUnavailable: the store could not be reached, or publishers kept winning
            the race for longer than a publisher waits.
        PolicyError: the sheet is too large to be a record, ``note`` or ``over_corrupt``
            is not text, the record does not decode and ``over_corrupt`` is not given,
            or it is given and the record decodes (field ``over-corrupt``).
    """
    if note is not None and (not isinstance(note, str) or len(note) > 1000):
        raise PolicyError("a note is text of at most 1000 characters", field="note")
    if over_corrupt is not None and (
        not isinstance(over_corrupt, str) or not 0 < len(over_corrupt.strip()) <= 1000
    ):
        raise PolicyError(
            "--over-corrupt needs a reason of 1 to 1000 characters", field="over-corrupt"
        )
    digest = _sha256(text)
    who = by or published_by()
    removed = False
    corrupt: int | None  # the version of the record that does not decode, if one is there
    for _ in range(_PUBLISH_ATTEMPTS):
        try:
            found = store.record_get(POLICY_SPACE, name)
        except RecordCorrupt as exc:
            if over_corrupt is None:
                raise _corrupt(name, exc) from None
            if exc.version is None:
                # Not even its version reads: remove it, then publish into the empty slot.
                removed = store.record_delete(POLICY_SPACE, name) or removed
                continue
            found, corrupt = None, exc.version
        else:
            corrupt = None
            if over_corrupt is not None and not removed:
                raise PolicyError(
                    f"--over-corrupt: published sheet {name!r} decodes"
                    + (
                        f" (revision {found[0].get('revision')})"
                        if found
                        else " (none is published)"
                    )
                    + ": publish without it",
                    field="over-corrupt",
                )
        revision, expected = 1, 0
        if corrupt is not None:
            revision, expected = corrupt + 1, corrupt
        elif found is not None:
            previous = found[0].get("revision")
            # A corrupt record is overwritten, never trusted: its revision only if sane.
            if type(previous) is int and previous >= 1:
                revision = previous + 1
            expected = found[1]
        import datetime as dt  # a publication's time: datetime loads with the first

        at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")
        value: dict[str, Any] = {
            "schema": POLICY_SCHEMA,
            "revision": revision,
            "sha256": digest,
            "sheet": text,
            "published_at": at,
            "published_by": who,
        }
        if note is not None:
            value["note"] = note
        if over_corrupt is not None:
            value["over_corrupt"] = over_corrupt
        try:
            version = store.record_put(POLICY_SPACE, name, value, version=expected)
        except ValueError as exc:
            raise PolicyError(f"cannot publish: {exc}", field="sheet") from None
        if version is not None:
            return PublishedSheet(
                name, revision, digest, text, at, who, note, version, over_corrupt
            )
    raise StoreUnavailable(f"gave up publishing {name!r}: other publishers kept winning")


class PolicyFollower:
    """Polls one published sheet and hands each new valid revision to ``adopt``.

    Built by :meth:`~toolbreaker.Registry.follow`; ``refresh()`` is one poll (the
    thread calls it every ``poll`` seconds, jittered by up to a fifth either way).

    Attributes:
        current: the last revision this process validated and adopted (``None`` until
            one is).
        adopted: revisions adopted.
        refused: revisions (or records) refused because they did not validate or did
            not decode; each is counted once, however often it is polled.
        read_errors: polls that could not read the store (an outage).
    """

    def __init__(
        self,
        store: Records,
        adopt: Callable[[PublishedSheet], None],
        *,
        name: str = "default",
        poll: float = 5.0,
        current: PublishedSheet | None = None,
    ) -> None:
        if (
            isinstance(poll, bool)
            or not isinstance(poll, (int, float))
            or not MIN_POLL_S <= poll <= MAX_POLL_S
        ):
            raise PolicyError(
                f"poll must be between {MIN_POLL_S} and {MAX_POLL_S:g} seconds, got {shown(poll)}",
                field="poll",
            )
        self.store = store
        self.name = name
        self.poll = float(poll)
        self.current = current
        self.adopted = 0
        self.refused = 0
        self.read_errors = 0
        self._adopt = adopt
        self._seen: tuple[int | None, object] | None = (
            None if current is None else (current.record_version, current.sha256)
        )
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        import random  # a watcher's: random loads with the first, not with a registry

        self._jitter = random.Random()  # noqa: S311 - jitter, not secrets

    def refresh(self) -> bool:
        """Poll once; whether a new revision was adopted."""
        with self._lock:
            try:
                found = self.store.record_get(POLICY_SPACE, self.name)
            except RecordCorrupt as exc:
                # The store answered: a bad record is a refusal, not an outage.
                self._refuse((exc.version, _GARBLED), _corrupt(self.name, exc))
                return False
            except StoreUnavailable as exc:
                self.read_errors += 1
                log.warning(f"toolbreaker: cannot read published sheet {self.name!r}: {exc}")
                return False
            except Exception as exc:  # noqa: BLE001 - a poll never raises into the thread
                self.read_errors += 1
                hook_failed(f"reading published sheet {self.name!r} failed", exc)
                return False
            if found is None:
                return False  # nothing published (or withdrawn): keep what we run
            value, version = found
            seen = (version, value.get("sha256"))
            if seen == self._seen:
                return False
            self._seen = seen
            try:
                sheet = _decode(self.name, value, version)
                if self.current is not None and sheet.sha256 == self.current.sha256:
                    self.current = sheet
                    return False
                self._adopt(sheet)
            except PolicyError as exc:
                self._refuse(seen, exc)
                return False
            self.current = sheet
            self.adopted += 1
            log.info(
                f"toolbreaker: adopted published sheet {self.name!r} revision {sheet.revision} "
                f"({sheet.sha256[:12]})"
            )
            return True

    def _refuse(self, seen: tuple[int | None, object], exc: PolicyError) -> None:
        """Count and log one refused record (once: a record is seen again unchanged)."""
        if seen[1] is _GARBLED:  # a record that decodes was marked seen before decoding
            if seen == self._seen:
                return
            self._seen = seen
        self.refused += 1
        hook_failed(
            f"published sheet {self.name!r} refused, keeping revision "
            f"{self.current.revision if self.current else 'none'}: {exc.located()}"
        )

    def start(self) -> None:
        """Poll on a daemon thread until :meth:`stop` (never on an event loop)."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"toolbreaker-policy-{self.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll * self._jitter.uniform(0.8, 1.2)):
            self.refresh()

    def stop(self) -> None:
        """Stop polling (waits for the thread to finish its poll)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
