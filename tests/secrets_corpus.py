"""A corpus of secret shapes, and the forms they reach an output in.

Every output a person or a model reads (stop packets, model-facing results, the journal,
logs, metrics labels) must hold none of these. A test pushes each shape, in each
variant, through an output and asks :func:`leaks` what survived::

    from secrets_corpus import SECRETS, leaks, nested, variants

    @pytest.mark.parametrize(("name", "secret"), SECRETS)
    def test_packets_hold_no_secret(name, secret):
        for text in variants(secret):
            assert not leaks(build_packet(detail=text).to_json(), secret)

All secrets are fake: made of a digest of their name, in the shape of the real thing.
Plain module, no toolbreaker import, so any test can use it.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

__all__ = [
    "SECRETS",
    "SHAPES",
    "Shape",
    "body",
    "fragments",
    "label",
    "leaks",
    "named_variants",
    "nested",
    "variants",
]

_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _random(seed: str, size: int, alphabet: str = _ALNUM) -> str:
    """``size`` characters of ``alphabet``, the same on every run for one ``seed``."""
    out: list[str] = []
    counter = 0
    while len(out) < size:
        block = hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        out.extend(alphabet[byte % len(alphabet)] for byte in block)
        counter += 1
    return "".join(out[:size])


def _hex(seed: str, size: int) -> str:
    return _random(seed, size, "0123456789abcdef")


def _upper(seed: str, size: int) -> str:
    return _random(seed, size, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _b64(seed: str, size: int) -> str:
    """Base64 text with ``+`` and ``/`` in it, as real keys have."""
    return _random(seed, size, _ALNUM + "+/")


def _url(seed: str, size: int) -> str:
    return _random(seed, size, _ALNUM + "-_")


@dataclasses.dataclass(frozen=True)
class Shape:
    """One secret shape.

    Attributes:
        name: what it is (``openai-project-key``).
        text: the secret as it appears in raw text, label included when it has one.
        body: the part that must never be seen; no 8 characters of it may survive.
        label: the text around it that must stay readable (``password=``), or ``""``.
    """

    name: str
    text: str
    body: str
    label: str = ""


def _token(name: str, prefix: str, rest: str) -> Shape:
    return Shape(name, prefix + rest, rest)


def _labelled(name: str, prefix: str, secret: str, after: str = "", shown: str = "") -> Shape:
    """``prefix + secret + after``; ``shown`` (by default ``prefix``) stays readable."""
    return Shape(name, prefix + secret + after, secret, shown or prefix)


def _password(seed: str) -> str:
    return _random(seed, 14) + "!$"


def _pem(kind: str, seed: str) -> Shape:
    lines = "\n".join(_b64(f"{seed}{i}", 64) for i in range(3))
    begin, end = f"-----BEGIN {kind}-----", f"-----END {kind}-----"
    return Shape(f"pem-{kind.lower().replace(' ', '-')}", f"{begin}\n{lines}\n{end}", lines)


_JWT_HEADER = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
_JWT_BODY = (
    base64.urlsafe_b64encode(json.dumps({"sub": _random("jwt-sub", 12)}).encode())
    .decode()
    .rstrip("=")
)
_JWT_SIGNATURE = _url("jwt-signature", 43)
_BASIC = base64.b64encode(f"ops:{_password('basic')}".encode()).decode()
_GCP_KEY = "\\n".join(_b64(f"gcp{i}", 64) for i in range(3))

SHAPES: tuple[Shape, ...] = (
    # AI providers
    _token("openai-legacy-key", "sk-", _random("openai", 48)),
    _token("openai-project-key", "sk-proj-", _url("openai-proj", 124)),
    _token("openai-service-account-key", "sk-svcacct-", _url("openai-svc", 64)),
    _token("anthropic-key", "sk-ant-api03-", _url("anthropic", 93) + "AA"),
    _token("groq-key", "gsk_", _random("groq", 52)),
    _token("hugging-face-token", "hf_", _random("hf", 34, _ALNUM[10:])),
    _token("replicate-token", "r8_", _random("replicate", 37)),
    _token("langsmith-key", "lsv2_pt_", _hex("langsmith", 32) + "_" + _hex("ls2", 10)),
    # code hosting and package registries
    _token("github-classic-token", "ghp_", _random("ghp", 36)),
    _token("github-oauth-token", "gho_", _random("gho", 36)),
    _token(
        "github-fine-grained-token", "github_pat_", _random("pat", 22) + "_" + _random("pat2", 59)
    ),
    _token("gitlab-token", "glpat-", _url("gitlab", 20)),
    _token("npm-token", "npm_", _random("npm", 36)),
    _token("pypi-token", "pypi-AgEIcHlwaS5vcmc", _url("pypi", 60)),
    # cloud
    _token("aws-access-key-id", "AKIA", _upper("aws-id", 16)),
    _labelled("aws-secret-access-key", "AWS_SECRET_ACCESS_KEY=", _b64("aws-secret", 40)),
    _token("google-api-key", "AIza", _url("google", 35)),
    _token("google-oauth-token", "ya29.", _url("ya29", 100)),
    _token("google-oauth-client-secret", "GOCSPX-", _url("gocspx", 28)),
    _labelled(
        "azure-storage-connection-string",
        "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=",
        _b64("azure", 86) + "==",
        ";EndpointSuffix=core.windows.net",
    ),
    _labelled(
        "azure-sas-url",
        "https://acme.blob.core.windows.net/c/report.pdf?sv=2022-11-02&sp=r&sig=",
        _random("sas", 43) + "%3D",
    ),
    _labelled(
        "s3-presigned-url",
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=",
        _hex("s3sig", 64),
    ),
    _token("digitalocean-token", "dop_v1_", _hex("do", 64)),
    _token("databricks-token", "dapi", _hex("databricks", 32)),
    _token("vault-token", "hvs.", _url("vault", 90)),
    # SaaS
    _token("stripe-live-key", "sk_live_", _random("stripe", 24)),
    _token("stripe-restricted-key", "rk_live_", _random("stripe-rk", 24)),
    _token("stripe-webhook-secret", "whsec_", _random("whsec", 32)),
    _token("slack-bot-token", "xoxb-", f"{_hex('s1', 12)}-{_hex('s2', 13)}-{_random('s3', 24)}"),
    _labelled(
        "slack-webhook-url",
        "https://hooks.slack.com/services/",
        f"T{_upper('slack-t', 8)}/B{_upper('slack-b', 10)}/{_random('slack-w', 24)}",
    ),
    _token("sendgrid-key", "SG.", _url("sg1", 22) + "." + _url("sg2", 43)),
    _token("twilio-api-key", "SK", _hex("twilio", 32)),
    _token("shopify-token", "shpat_", _hex("shopify", 32)),
    _token("atlassian-token", "ATATT3xFfGF0", _url("atlassian", 180)),
    _token("telegram-bot-token", "7312345678:AA", _url("telegram", 33)),
    _token("age-secret-key", "AGE-SECRET-KEY-1", _upper("age", 58)),
    # generic credentials
    Shape("jwt", f"{_JWT_HEADER}.{_JWT_BODY}.{_JWT_SIGNATURE}", f"{_JWT_BODY}.{_JWT_SIGNATURE}"),
    _labelled(
        "authorization-bearer", "Authorization: Bearer ", _url("bearer", 40), shown="Authorization:"
    ),
    _labelled("authorization-basic", "Authorization: Basic ", _BASIC, shown="Authorization:"),
    _labelled("bearer-in-prose", "sent Bearer ", _url("bearer-prose", 40)),
    _labelled("x-api-key-header", "x-api-key: ", _random("x-api-key", 32)),
    _labelled(
        "cookie-header", "Cookie: session=", _random("cookie", 32), "; theme=dark", "Cookie:"
    ),
    _labelled(
        "api-key-query-param", "https://api.example.com/v1/items?api_key=", _random("qp", 32)
    ),
    _labelled(
        "access-token-query-param",
        "https://api.example.com/cb?state=xyz&access_token=",
        _url("qp-token", 40),
    ),
    _labelled("https-url-password", "https://ops:", _password("https"), "@crm.example.com/t/7"),
    _labelled("postgres-url", "postgres://app_user:", _password("pg"), "@db.internal:5432/prod"),
    _labelled("mongodb-srv-url", "mongodb+srv://admin:", _password("mongo"), "@c0.example.net/db"),
    _labelled("redis-url", "redis://:", _password("redis"), "@cache:6379/0"),
    _labelled("password-pair", "password=", _password("pair")),
    _labelled("password-json-field", '{"password": "', _password("json"), '"}'),
    _labelled("db-password-env", "DB_PASSWORD=", _password("env")),
    _labelled("client-secret-pair", "client_secret=", _url("client-secret", 40)),
    _pem("RSA PRIVATE KEY", "rsa"),
    _pem("OPENSSH PRIVATE KEY", "ssh"),
    _pem("EC PRIVATE KEY", "ec"),
    _labelled(
        "gcp-service-account-private-key",
        '"private_key": "-----BEGIN PRIVATE KEY-----\\n',
        _GCP_KEY,
        '\\n-----END PRIVATE KEY-----\\n"',
        '"private_key": "',
    ),
)

#: ``(name, raw secret text)`` of every shape.
SECRETS: list[tuple[str, str]] = [(shape.name, shape.text) for shape in SHAPES]

_BY_TEXT = {shape.text: shape for shape in SHAPES}


def _shape(secret: str) -> Shape:
    return _BY_TEXT.get(secret) or Shape("ad-hoc", secret, secret)


def body(secret: str) -> str:
    """The part of ``secret`` that must never be seen (all of it for an unknown text)."""
    return _shape(secret).body


def label(secret: str) -> str:
    """The part of ``secret`` that should stay readable, or ``""``."""
    return _shape(secret).label


def _escape_all(text: str) -> str:
    """Every character but letters and digits as a JSON ``\\uXXXX`` escape."""
    return "".join(c if c.isalnum() else f"\\u{ord(c):04x}" for c in text)


def named_variants(secret: str) -> list[tuple[str, str]]:
    """``secret`` in each form it reaches an output in, with the name of the form."""
    said = f"said:\n{secret}"
    quote, quote_plus = urllib.parse.quote, urllib.parse.quote_plus
    return [
        ("raw", secret),
        ("sentence", f"The tool replied with {secret} and stopped."),
        ("after-newline", said),
        ("repr", repr(said)),
        ("repr-bytes", repr(said.encode())),
        ("log-line", f"2026-08-01T10:00:00Z ERROR tool failed: {said!r}"),
        ("json", json.dumps({"output": said})),
        ("json-twice", json.dumps(json.dumps({"output": said}))),
        ("json-u0022", json.dumps({"output": secret}).replace('"', "\\u0022")),
        ("json-escape-all", _escape_all(json.dumps({"output": said}))),
        ("url-quote", quote(f"said: {secret}", safe="")),
        ("url-quote-path", quote(secret)),
        ("url-quote-plus", quote_plus(f"said: {secret}")),
        ("url-query", f"https://example.com/next?to={quote_plus(secret)}&page=2"),
        ("url-json", quote(json.dumps({"output": said}), safe="")),
        ("after-%3D", f"key%3D{secret}"),
        ("after-%20", f"token%20{secret}"),
        ("after-%2F", f"cred%2F{secret}"),
    ]


def variants(secret: str) -> list[str]:
    """``secret`` raw, escaped (``repr``, JSON), URL-encoded, after a newline, in prose."""
    return [text for _, text in named_variants(secret)]


class _Holder:
    """An object whose ``repr`` shows the secret, as a client or an exception would."""

    def __init__(self, secret: str) -> None:
        self.secret = secret

    def __repr__(self) -> str:
        return f"Holder(config={{'endpoint': 'x', 'value': {self.secret!r}}})"


def nested(secret: str) -> list[Any]:
    """``secret`` inside dicts, lists, tuples, sets, bytes, keys and objects."""
    deep: Any = secret
    for _ in range(20):
        deep = [{"level": deep}]
    return [
        {"result": secret},
        {"outer": [{"inner": (f"said:\n{secret}",)}]},
        [("log", repr({"output": secret}))],
        {"headers": {"X-Trace": secret}},
        {secret: "value"},
        {b"output": secret.encode()},
        {"items": {secret}, "frozen": frozenset({secret})},
        {"client": _Holder(secret)},
        {"error": ValueError(secret)},
        {"encoded": urllib.parse.quote(secret, safe=""), "escaped": json.dumps(secret)},
        deep,
    ]


def fragments(secret: str) -> list[str]:
    """What must not appear: the raw text and every 8-character window of its body."""
    part = body(secret)
    windows = {part[i : i + 8] for i in range(max(len(part) - 7, 1))}
    return [secret, *sorted(w for w in windows if "\n" not in w and len(w) == 8)]


def _texts(value: Any, seen: set[int]) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (bytes, bytearray)):
        yield bytes(value).decode("utf-8", "replace")
    elif isinstance(value, (dict, list, tuple, set, frozenset)):
        if id(value) in seen:
            return
        seen.add(id(value))
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for key, item in items:
            if key is not None:
                yield from _texts(key, seen)
            yield from _texts(item, seen)
    elif value is not None:
        yield repr(value)


def leaks(output: Any, secret: str) -> list[str]:
    """The fragments of ``secret`` found in ``output`` (text or any structure); ``[]`` if none.

    A structure is searched in every string, key and ``repr`` it holds, and in its own
    ``repr``.
    """
    texts = [*_texts(output, set()), repr(output)]
    return [part for part in fragments(secret) if any(part in text for text in texts)]
