"""Secret masking for operator packets: secrets go, everything useful stays."""

from __future__ import annotations

import copy
import datetime
import enum
import hashlib
import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from secrets_corpus import SECRETS, body, label, leaks, named_variants, nested
from toolbreaker.core._run.redact import CYCLE, REDACTED, is_secret_key, redact, redact_text

# --- secret key names ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "PASSWORD",
        "db_password",
        "passwd",
        "pwd",
        "db_pass",
        "secret",
        "client_secret",
        "clientSecret",
        "token",
        "access_token",
        "accessToken",
        "refresh_token",
        "id_token",
        "api_key",
        "apikey",
        "X-Api-Key",
        "openaiApiKey",
        "OPENAI_API_KEY",
        "APIKey",
        "access_key",
        "aws_secret_access_key",
        "private_key",
        "Authorization",
        "Proxy-Authorization",
        "auth",
        "x-auth-token",
        "Cookie",
        "Set-Cookie",
        "session",
        "sessionID",
        "credentials",
        "bearer",
        "jwt",
        "otp",
    ],
)
def test_secret_key_names(name: str) -> None:
    """Names of credentials are secrets in any case, separator or camelCase spelling."""
    assert is_secret_key(name)


@pytest.mark.parametrize(
    "name",
    [
        "author",
        "authored_by",
        "possession",
        "bypass",
        "max_tokens",
        "input_tokens",
        "tokens_used",
        "token_count",
        "token_budget",
        "token_type",
        "password_length",
        "password_policy",
        "auth_url",
        "secret_name",
        "credentials_path",
        "session_ttl",
        "expires_in",
        "secretary",
        "recipient",
        "task_id",
        "fingerprint",
        "key",
    ],
)
def test_innocent_key_names(name: str) -> None:
    """Words that merely contain a marker, and names that describe a secret, are kept."""
    assert not is_secret_key(name)


def test_extra_keys_extend_the_names() -> None:
    """``extra_keys`` match anywhere in the normalised name, and win over descriptive words."""
    assert is_secret_key("customer_SSN", extra_keys=["ssn"])
    assert is_secret_key("ssn_type", extra_keys=["SSN"])
    assert not is_secret_key("customer_ssn")


def test_extra_keys_refuse_a_bare_string() -> None:
    """A single string for ``extra_keys`` is an error, not a set of one-letter names."""
    with pytest.raises(TypeError):
        redact({}, extra_keys="ssn")


# --- values of secret keys -------------------------------------------------------------


def test_values_of_secret_keys_are_masked_at_any_depth() -> None:
    """Secret-named values are masked in nested dicts and lists; other values are kept."""
    packet = {
        "task_id": "task-7",
        "headers": {"X-Api-Key": "abc", "Accept": "application/json"},
        "calls": [{"tool": "pay", "password": "hunter2", "amount": 12}],
    }
    assert redact(packet) == {
        "task_id": "task-7",
        "headers": {"X-Api-Key": REDACTED, "Accept": "application/json"},
        "calls": [{"tool": "pay", "password": REDACTED, "amount": 12}],
    }


@pytest.mark.parametrize("value", [12345, {"user": "a", "pw": "b"}, ["x"], 1.5])
def test_secret_key_masks_any_type(value: Any) -> None:
    """A container or number under a secret name is masked whole: its shape is no help."""
    assert redact({"credentials": value}) == {"credentials": REDACTED}


@pytest.mark.parametrize("value", [None, True, False, ""])
def test_secret_key_keeps_values_that_hide_nothing(value: Any) -> None:
    """None, booleans and the empty string say whether a credential was there, nothing more."""
    assert redact({"token": value}) == {"token": value}


def test_extra_keys_mask_values() -> None:
    """Values under names given in ``extra_keys`` are masked too."""
    assert redact({"customer_ssn": "123-45-6789"}, extra_keys=["ssn"]) == {"customer_ssn": REDACTED}


# --- secrets inside text ---------------------------------------------------------------

_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("Authorization: Bearer abc.DEF-123", f"Authorization: {REDACTED}"),
        ('{"authorization": "Token abc123"}', f'{{"authorization": "{REDACTED}"}}'),
        ("Cookie: sid=abc123; theme=dark", f"Cookie: {REDACTED}"),
        ("use Bearer abcDEF123456 now", f"use Bearer {REDACTED} now"),
        ("curl -u x Basic dXNlcjpwYXNzd29yZA==", f"curl -u x Basic {REDACTED}"),
        (f"jwt {_JWT} end", f"jwt {REDACTED} end"),
        (
            "postgres://app:s3cr@t!@db.internal:5432/prod",
            f"postgres://app:{REDACTED}@db.internal:5432/prod",
        ),
        ("redis://:hunter22@cache:6379", f"redis://:{REDACTED}@cache:6379"),
        ("password=hunter2&user=bob", f"password={REDACTED}&user=bob"),
        ('{"password": "hunter 2", "user": "bob"}', f'{{"password": "{REDACTED}", "user": "bob"}}'),
        ("OPENAI_API_KEY=abc123", f"OPENAI_API_KEY={REDACTED}"),
        ("key: sk-proj-abcdefghijklmnopqrstuvwx0123", f"key: {REDACTED}"),
        ("sk-ant-api03-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA!", f"{REDACTED}!"),
        ("stripe sk_live_abcdefghij0123456789", f"stripe {REDACTED}"),
        ("gh ghp_abcdefghijklmnopqrstuvwxyz0123456789", f"gh {REDACTED}"),
        ("pat github_pat_11ABCDEFG0123456789_abcdefghij", f"pat {REDACTED}"),
        ("id AKIAIOSFODNN7EXAMPLE here", f"id {REDACTED} here"),
        ("slack xoxb-123456789012-abcdefghijkl", f"slack {REDACTED}"),
        ("g AIzaSyA-abcdefghijklmnopqrstuvwxyz01234", f"g {REDACTED}"),
        (
            "k -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- ok",
            f"k {REDACTED} ok",
        ),
    ],
)
def test_secrets_in_text_are_masked(text: str, masked: str) -> None:
    """Known secret formats are masked inside strings; labels and schemes stay readable."""
    assert redact_text(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "breaker opened: 3 qualifying failures on send_email",
        "basic authentication is configured; bearer tokens rotate daily",
        "max_tokens: 500, tokens: 20",
        "the task-abcdefghijklmnopqrstuvwxyz finished",
        "http://host:8080/status?email=ops@example.com",
        "https://example.com/path",
        "customer-1842 renewal-2026-08",
        "fingerprint 13eb20c78061ee7e5b63f13da6ee2ed1e05c95e0aaf13f44d56a3777e352902f",
        "tb1-8e577377f660e5827cb214c19282dfc1",
    ],
)
def test_innocent_text_is_kept(text: str) -> None:
    """Prose, ids, fingerprints and plain URLs pass through unchanged."""
    assert redact_text(text) == text


def test_redacting_twice_changes_nothing_more() -> None:
    """Masked output is a fixed point: redacting it again gives the same text."""
    text = f"Authorization: Bearer x1; password=hunter2 {_JWT} postgres://a:b@c/d"
    once = redact_text(text)
    assert redact_text(once) == once


_ADVERSARIAL = ["a-", "a.", "sk-", "eyJaaaa.", "x://a:", 'password="x']
_MASK_ALL = """
import resource, sys
from toolbreaker.core._run.redact import redact_text
resource.setrlimit(resource.RLIMIT_CPU, (60, 60))
for unit in sys.argv[1:]:
    redact_text(unit * (1_000_000 // len(unit)))
print("done")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_CPU is POSIX")
def test_long_adversarial_text_is_linear() -> None:
    """Masking takes linear time: a 1 MB run of each near-match finishes inside a CPU limit.

    Linear masking takes about half a second of CPU per megabyte here; a quadratic
    pattern would take hours, so a 60 s limit on CPU time (not the wall clock: a busy
    machine does not move it) tells the two apart without timing anything.
    """
    done = subprocess.run(
        [sys.executable, "-c", _MASK_ALL, *_ADVERSARIAL],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "done"


# --- structure -------------------------------------------------------------------------


def test_input_is_never_mutated() -> None:
    """The input is left exactly as it was; the output shares no containers with it."""
    packet = {"password": "x", "calls": [{"token": "t"}], "note": ("Bearer abc123XYZ",)}
    before = copy.deepcopy(packet)
    out = redact(packet)
    assert packet == before
    assert out["calls"] is not packet["calls"]
    assert out["calls"][0] is not packet["calls"][0]


def test_containers_keep_their_kind() -> None:
    """Lists, tuples, sets and frozensets come back as such, with their items redacted."""
    secret = "sk-" + "a" * 30
    out = redact([(secret, 1), {secret}, frozenset({secret})])
    assert out == [(REDACTED, 1), {REDACTED}, frozenset({REDACTED})]


@pytest.mark.parametrize(
    "value",
    [
        0,
        -3.5,
        Decimal("1.10"),
        None,
        True,
        datetime.datetime(2026, 8, 1, tzinfo=datetime.timezone.utc),
        uuid.UUID(int=7),
    ],
)
def test_immutable_scalars_are_returned_as_is(value: Any) -> None:
    """Numbers, None, booleans, dates and UUIDs come back unchanged."""
    assert redact(value) is value


def test_other_objects_become_masked_text() -> None:
    """An object of another type becomes its ``repr``, masked, so it cannot leak."""

    class Client:
        def __repr__(self) -> str:
            return "Client(token=abc123)"

    assert redact({"client": Client()}) == {"client": f"Client(token={REDACTED})"}


def test_a_failing_repr_does_not_stop_redaction() -> None:
    """A ``__repr__`` that raises gives the type name instead of an exception."""

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert redact([Broken()]) == ["<Broken>"]


def test_cycles_are_cut() -> None:
    """A container inside itself becomes ``[CYCLE]`` where it recurs."""
    packet: dict[str, Any] = {"a": 1, "items": []}
    packet["items"].append(packet)
    assert redact(packet) == {"a": 1, "items": [CYCLE]}


def test_shared_values_are_not_cycles() -> None:
    """The same list referenced twice is copied twice, not reported as a cycle."""
    shared = ["x"]
    assert redact({"a": shared, "b": shared}) == {"a": ["x"], "b": ["x"]}


def test_keys_are_kept_verbatim() -> None:
    """Dictionary keys that hold no secret are kept as they are, whatever their type."""
    assert list(redact({"password": 1, 3: "x", b"raw": 2, ("a", 1): 3})) == [
        "password",
        3,
        b"raw",
        ("a", 1),
    ]


# --- properties ------------------------------------------------------------------------

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_UPPER_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_SEPARATORS = st.sampled_from([" ", "\n", "\t", ":", "=", ",", ";", '"', "'", "(", "/", "|"])


def _secrets() -> st.SearchStrategy[str]:
    alnum = st.text(alphabet=_ALNUM, min_size=40, max_size=48)
    b64url = st.text(alphabet=_ALNUM + "-_", min_size=8, max_size=40)
    return st.one_of(
        alnum.map(lambda s: "sk-" + s),
        alnum.map(lambda s: "sk-ant-api03-" + s),
        alnum.map(lambda s: "ghp_" + s),
        st.text(alphabet=_UPPER_DIGITS, min_size=16, max_size=16).map(lambda s: "AKIA" + s),
        alnum.map(lambda s: "xoxb-" + s),
        st.tuples(b64url, b64url).map(lambda p: f"eyJ{p[0]}.eyJ{p[1]}.{p[0][::-1]}"),
    )


_FILLER = st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,", max_size=20)
_INNOCENT_KEYS = st.sampled_from(
    ["name", "city", "author", "max_tokens", "tool", "amount", "possession", "recipient", "items"]
)


@given(
    secret=_secrets(),
    before=_FILLER,
    after=_FILLER,
    left=_SEPARATORS,
    right=_SEPARATORS,
    key=_INNOCENT_KEYS,
    depth=st.integers(min_value=0, max_value=3),
)
def test_property_generated_secrets_never_survive(
    secret: str, before: str, after: str, left: str, right: str, key: str, depth: int
) -> None:
    """A generated token anywhere in any string is absent from the JSON of the output."""
    value: Any = f"{before}{left}{secret}{right}{after}"
    for _ in range(depth):
        value = {key: [value, 1]}
    assert secret not in json.dumps(redact(value))


@given(
    password=st.text(alphabet=_ALNUM + "!$%^*@", min_size=12, max_size=30),
    scheme=st.sampled_from(["postgres", "redis", "https", "amqp"]),
)
def test_property_url_passwords_never_survive(password: str, scheme: str) -> None:
    """The password of a URL with credentials is masked; user and host are kept."""
    out = redact_text(f"connect {scheme}://app:{password}@db.internal:5432/x")
    assert password not in out
    assert out == f"connect {scheme}://app:{REDACTED}@db.internal:5432/x"


@given(value=st.text(), name=st.sampled_from(["password", "X-Api-Key", "authToken", "cookie"]))
def test_property_secret_key_values_never_survive(value: str, name: str) -> None:
    """Any non-empty string under a secret key is gone from the output."""
    out = redact({"outer": [{name: value}]})
    assert out == {"outer": [{name: REDACTED if value else ""}]}


_INNOCENT = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(alphabet="abcdefghijklmnopqrstuvwxyz .,!?", max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_INNOCENT_KEYS, inner, max_size=4),
    max_leaves=20,
)


@given(value=_INNOCENT)
def test_property_innocent_values_are_unchanged(value: Any) -> None:
    """Values whose keys and text are innocuous come back equal."""
    assert redact(value) == value


_FRAGMENTS = st.sampled_from(
    [
        *"aB0 :=\"'@/.-_[](){}",
        "sk-",
        "eyJ",
        "xoxb-",
        "AKIA",
        "password",
        "token",
        "Bearer ",
        "://",
        "Authorization: ",
        "Cookie:",
        "\\n",
        "\\",
        '\\"',
        "\\u0022",
        "%3D",
        "%20",
        "%2F",
        "+",
        "ghp_",
        "AccountKey=",
        "?sig=",
        "-----BEGIN PRIVATE KEY-----",
        REDACTED,
    ]
)


@given(text=st.lists(_FRAGMENTS, max_size=40).map("".join))
def test_property_redacting_twice_changes_nothing_more(text: str) -> None:
    """Masked text is a fixed point, whatever fragments of secrets it was built from."""
    once = redact_text(text)
    assert redact_text(once) == once


# --- the corpus: every secret shape, in every form it reaches an output in ----------------


def test_the_corpus_covers_enough_shapes() -> None:
    """At least 30 distinct secret shapes, each with a body long enough to check."""
    names = [name for name, _ in SECRETS]
    assert len(set(names)) == len(names) >= 30
    assert all(len(body(secret)) >= 16 for _, secret in SECRETS)


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_every_shape_in_every_form_is_masked(name: str, secret: str) -> None:
    """Raw, in prose, after a newline, repr-escaped, JSON-escaped or URL-encoded: nothing
    of the secret survives, not even 8 characters of its body."""
    leaked = {
        form: found
        for form, text in named_variants(secret)
        if (found := leaks(redact_text(text), secret))
    }
    assert not leaked, f"{name} leaked in {sorted(leaked)}: {leaked}"


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_every_form_is_masked_inside_structures(name: str, secret: str) -> None:
    """The same texts inside a packet-like structure are masked by ``redact``."""
    leaked = {
        form: found
        for form, text in named_variants(secret)
        if (found := leaks(redact({"detail": text, "calls": [{"result": (text,)}]}), secret))
    }
    assert not leaked, f"{name} leaked in {sorted(leaked)}: {leaked}"


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_every_shape_nested_is_masked(name: str, secret: str) -> None:
    """In dicts, lists, tuples, sets, bytes, object reprs, exceptions and as a dict key."""
    leaked = [value for value in nested(secret) if leaks(redact(value), secret)]
    assert not leaked, f"{name} leaked from {leaked}"


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_labels_stay_readable(name: str, secret: str) -> None:
    """What names the secret (``password=``, ``Authorization:``, the URL) is kept."""
    assert label(secret) in redact_text(secret)


@pytest.mark.parametrize(("name", "secret"), SECRETS)
def test_masking_the_corpus_twice_changes_nothing(name: str, secret: str) -> None:
    """Masked output is a fixed point in every form."""
    for form, text in named_variants(secret):
        once = redact_text(text)
        assert redact_text(once) == once, f"{name} in form {form}"


_PROJECT_KEY = "sk-proj-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
_GITHUB = "ghp_" + "aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2"
_AWS_ID = "AKIA" + "Z7QW3KJ4PL2MN8XR"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (repr(f"said:\n{_PROJECT_KEY}"), f"'said:\\n{REDACTED}'"),
        (f"said:\\\\n{_PROJECT_KEY}", f"said:\\\\n{REDACTED}"),
        (f"a%3D{_PROJECT_KEY}", f"a%3D{REDACTED}"),
        (f"token%20{_GITHUB}", f"token%20{REDACTED}"),
        (f"cred%2F{_AWS_ID}", f"cred%2F{REDACTED}"),
        (f"q=token+{_GITHUB}&x=1", f"q=token+{REDACTED}&x=1"),
        ('\\"password\\": \\"hunter2 x\\"', f'\\"password\\": \\"{REDACTED}\\"'),
        (
            "\\u0022password\\u0022: \\u0022hunter2\\u0022",
            f"\\u0022password\\u0022: \\u0022{REDACTED}\\u0022",
        ),
        ("password%3Dhunter2%26user%3Dbob", f"password%3D{REDACTED}%26user%3Dbob"),
        (
            "postgres%3A%2F%2Fapp%3As3cret%40db%2Fprod",
            f"postgres%3A%2F%2Fapp%3A{REDACTED}%40db%2Fprod",
        ),
        ("Authorization%3A+Bearer+abcDEF123456", f"Authorization%3A+{REDACTED}"),
        (
            "AccountName=a;AccountKey=abc+/def==;Suffix=x",
            f"AccountName=a;AccountKey={REDACTED};Suffix=x",
        ),
        ("GET /f?sv=2022&sig=ab%2Bcd%3D&se=1", f"GET /f?sv=2022&sig={REDACTED}&se=1"),
    ],
)
def test_escaped_and_encoded_secrets_are_masked_where_written(text: str, masked: str) -> None:
    """A secret behind an escape or an encoding is masked in place; escapes stay as written."""
    assert redact_text(text) == masked


@pytest.mark.parametrize(
    "key",
    [b"password", b"X-Api-Key", ("db", "password"), 7.5, "X-Api-Key"],
)
def test_keys_that_are_not_strings_are_judged_by_their_text(key: Any) -> None:
    """``{b"password": ...}`` is masked like ``{"password": ...}``; the key is kept."""
    out = redact({key: "hunter2", "other": "kept"})
    assert out[key] == (REDACTED if key != 7.5 else "hunter2")
    assert out["other"] == "kept"


def test_enum_keys_are_judged_by_their_text() -> None:
    """An enum member key named like a secret is a secret key."""

    class Field(enum.Enum):
        PASSWORD = "p"
        NAME = "n"

    assert redact({Field.PASSWORD: "x", Field.NAME: "bob"}) == {
        Field.PASSWORD: REDACTED,
        Field.NAME: "bob",
    }


def test_a_key_whose_str_fails_is_judged_by_its_repr() -> None:
    """A key object with a broken ``__str__`` does not stop masking."""

    class Key:
        def __str__(self) -> str:
            raise RuntimeError("no")

        def __repr__(self) -> str:
            return "Key(token)"

    key = Key()
    assert redact({key: "abc"}) == {key: REDACTED}


def test_keys_holding_secrets_are_masked_without_merging() -> None:
    """A secret used as a key is masked; masked keys are numbered, no value is lost."""
    first, second = _PROJECT_KEY, _PROJECT_KEY[:-1] + "Q"
    out = redact({first: 1, REDACTED: 2, second: 3, b"sk-" + b"x" * 30: 4})
    assert out == {REDACTED + " #2": 1, REDACTED: 2, REDACTED + " #3": 3, REDACTED + " #4": 4}
    assert redact(out) == out


# --- what must stay: ordinary prose and identifiers ---------------------------------------

_SHA256 = hashlib.sha256(b"x").hexdigest()
_INNOCENT_TEXTS = [
    "order ORD-2026-000123 shipped to customer-1842",
    f"request {uuid.UUID(int=12345678901234567890)} done",
    f"sha256 {_SHA256}",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "2026-08-01T10:00:00Z to 2026-08-31T23:59:59+02:00",
    "send a bearer token in the Authorization header; basic auth is off",
    "the token budget is 4000 tokens; max_tokens=512",
    "CPU at 95% for 10 minutes, 100%25 of quota, 3+4=7",
    "C:\\Users\\ops\\tokens\\report.txt",
    "https://example.com/search?q=circuit+breaker&page=2",
    "https://user@example.com/path",
    "SKU-12345 and sk-1 and a task-abcdefghijklmnopqrstuvwxyz",
    "line one\nline two\ttabbed",
    "cache key: 'user:42:profile'",
]


def _innocent_forms(text: str) -> list[str]:
    return [
        text,
        repr(text),
        json.dumps({"output": text}),
        json.dumps(json.dumps({"output": text})),
        urllib.parse.quote(text, safe=""),
        urllib.parse.quote_plus(text),
    ]


@pytest.mark.parametrize("text", _INNOCENT_TEXTS)
def test_ordinary_text_is_kept_in_every_form(text: str) -> None:
    """Order ids, UUIDs, digests, dates, prose about tokens: unchanged raw, escaped or encoded."""
    for form in _innocent_forms(text):
        assert redact_text(form) == form


def test_ordinary_structures_are_kept() -> None:
    """A typical tool result with ids, dates, digests and URLs comes back equal."""
    result = {
        "order_id": "ORD-2026-000123",
        "request_uuid": str(uuid.UUID(int=7)),
        "digest": _SHA256,
        "created": "2026-08-01T10:00:00Z",
        "links": ["https://example.com/a%20b?x=1&y=2"],
        "usage": {"input_tokens": 120, "max_tokens": 512},
        b"raw": b"plain bytes",
    }
    out = redact(result)
    assert {k: v for k, v in out.items() if k != b"raw"} == {
        k: v for k, v in result.items() if k != b"raw"
    }


def test_masking_remembers_short_texts_without_keeping_the_secret():
    """Short texts are masked once and remembered (names and reasons recur on every
    notice), by digest: nothing the cache holds contains the secret it masked."""
    from toolbreaker.core._run import redact as module

    secret = "sk-proj-" + "Q7w8E9r0" * 5
    text = f"tool search-{secret}"
    first = redact_text(text)
    assert secret not in first
    assert redact_text(text) == first
    assert all(isinstance(key, bytes) and len(key) == 32 for key in module._MASKED)  # digests
    assert not any(secret in masked for masked in module._MASKED.values())
