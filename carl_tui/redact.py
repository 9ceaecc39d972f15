"""Remove secrets from text before it is shown, saved or sent anywhere.

Masks Hugging Face tokens (`hf_...`), Anthropic keys (`sk-ant-...`),
`Authorization:` / `Bearer` credentials, `key=value` pairs and `--flag value`
options whose name speaks of a secret, and the literal value of every
environment variable whose name contains TOKEN, KEY, SECRET or PASSWORD.

Structured data (a run's config, a job's command) is masked by field:
`is_secret_key(name)` says whether a field's value is a secret
(`hub_token`, `WANDB_API_KEY`, `--hub-token`; not `max_new_tokens` nor
`pad_token`); `carl_tui/store/sanitize.py` applies it to every event.

Text that arrives in pieces (Claude's streamed answer) goes through a
`StreamRedactor`, so that a secret split across pieces is masked too.

Mask first, cut after: a secret cut in two by a truncation can no longer be
recognised.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

MASK = "[REDACTED]"
SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
MIN_SECRET_LEN = 6  # shorter env values ("1", "true") are not worth masking and would shred text

_PATTERNS = (
    # Anthropic keys: sk-ant-api03-..., sk-ant-admin01-...
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    # Hugging Face user / org / api tokens (mixed case: `hf_transfer` is a package).
    re.compile(r"\b(?:hf|api_org)_(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{8,}\b"),
    # The start of either, cut short by a truncation mark (`hf_QxLm…`).
    re.compile(r"(?:\b(?:hf|api_org)_(?=[a-z]*[A-Z0-9])[A-Za-z0-9]{1,7}|sk-ant-[A-Za-z0-9_\-]{1,7})"
               r"(?=…|\.\.\.)"),
    # Authorization headers in any case, any scheme: keep the header name.
    re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;}]+"),
    # Bearer credentials on their own.
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]{6,}"),
    # x-api-key: ... headers.
    re.compile(r"(?i)(\bx-api-key\b[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+"),
    # NAME=value / "name": "value" where the name speaks of a secret.
    re.compile(
        r"(?i)(\b[A-Za-z0-9_.\-]*(?:token|apikey|[A-Za-z0-9][_-]key"
        r"|(?:secret|password|passwd)s?(?:[_.\-][A-Za-z0-9_.\-]*)?)[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])(?![\d.eE+\-]+\b)"
        r"[^\s\"',;}]{4,}"
    ),
    # --name value (a command line) where the name speaks of a secret.
    re.compile(
        r"(?i)((?<![\w-])--?[A-Za-z0-9_\-]*(?:token|apikey|[A-Za-z0-9][_-]key"
        r"|(?:secret|password|passwd)s?(?:[_\-][A-Za-z0-9_\-]*)?)[\"']?\s+[\"']?)(?!\[REDACTED\])(?![\d.eE+\-]+\b)(?!-)[^\s\"',;}]{4,}"
    ),
)


def is_secret_name(name: str) -> bool:
    """An environment variable whose value is masked wherever it shows."""
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_SECRET_WORDS = frozenset({
    "token", "secret", "secrets", "password", "passwd", "passphrase", "credential",
    "credentials", "apikey", "authorization", "bearer",
})
# Tokenizer settings (`pad_token: <pad>`) name tokens, not credentials.
_TOKENIZER_WORDS = frozenset({
    "pad", "eos", "bos", "unk", "sep", "cls", "mask", "special", "chat", "start", "end",
    "image", "audio", "video", "vision", "think", "tool", "additional",
})


def is_secret_key(name: object) -> bool:
    """Whether a field (a config key, a `--flag`) named `name` holds a secret.

    Every `*_key`, `*_token`, `*password*` and `*secret*` name does: `hub_token`,
    `HF_TOKEN`, `WANDB_API_KEY`, `wandb_key`, `--wandb-key`, `apiKey`, `--hub-token`,
    `password`, `secrets` (and `sort_key`: masking a sort key costs little, missing a
    key costs a secret); `max_new_tokens`, `tokenizer_name`, `pad_token`, `key`,
    `monkey` do not."""
    return isinstance(name, str) and _secret_key(name)


@lru_cache(maxsize=4096)
def _secret_key(name: str) -> bool:
    """`is_secret_key` of a string (config keys come again with every run's config)."""
    words = [w.lower() for w in _WORDS.findall(name)]
    for i, word in enumerate(words):
        before = words[i - 1] if i else ""
        if word in _SECRET_WORDS and not (word == "token" and before in _TOKENIZER_WORDS):
            return True
        if word == "key" and before:  # `wandb_key`, `--wandb-key`: a key of something
            return True
    return False


def env_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment variables whose names say they are secret, longest first.

    For the process environment the answer is kept until the environment changes
    (comparing a copy of it costs a microsecond; reading it again, a hundred)."""
    global _env_cache
    if env is not None:
        return _env_secrets(env)
    data = getattr(os.environ, "_data", None)
    if not isinstance(data, dict):
        return _env_secrets(os.environ)
    cached = _env_cache
    if cached is not None and cached[0] == data:
        return list(cached[1])
    snapshot = dict(data)
    values = _env_secrets(os.environ)
    _env_cache = (snapshot, tuple(values))
    return values


_env_cache: tuple[dict, tuple[str, ...]] | None = None


def _env_secrets(env: Mapping[str, str]) -> list[str]:
    values = {
        v.strip()
        for k, v in env.items()
        if is_secret_name(k) and v and len(v.strip()) >= MIN_SECRET_LEN
    }
    return sorted(values, key=len, reverse=True)


def _literals(extra: Iterable[object], env: Mapping[str, str] | None) -> list[str]:
    """Literal secrets to mask, longest first: `extra` (strings, or objects with a
    `.value` such as a token held in memory) and the environment's secrets."""
    values = {getattr(s, "value", s) for s in extra}
    literals = [s for s in values if isinstance(s, str) and len(s) >= MIN_SECRET_LEN]
    return sorted(literals, key=len, reverse=True) + env_secrets(env)


def redact(
    text: str,
    extra: Iterable[object] = (),
    *,
    env: Mapping[str, str] | None = None,
) -> str:
    """`text` with every secret replaced by `[REDACTED]`.

    `extra` adds literal secrets to mask (e.g. a token held in memory);
    `env` defaults to the process environment.
    """
    if not text:
        return text
    return _redact(text, _literals(extra, env))


def redact_argv(argv: Iterable[object], extra: Iterable[object] = ()) -> tuple[str, ...]:
    """A command line with its secrets masked: each argument as `redact` masks it, and
    the one after a flag whose name speaks of a secret (`--hub-token VALUE`) whole."""
    out: list[str] = []
    secret_next = False
    for arg in map(str, argv):
        out.append(MASK if secret_next and arg else redact(arg, extra))
        secret_next = arg.startswith("-") and "=" not in arg and is_secret_key(arg)
    return tuple(out)


class Redactor:
    """`redact` with the literal secrets (`extra` and the environment's) read once, for
    masking many texts: `Redactor()(text)`. `literals` is hashable (a cache key)."""

    __slots__ = ("literals",)

    def __init__(self, extra: Iterable[object] = (), *, env: Mapping[str, str] | None = None):
        self.literals: tuple[str, ...] = tuple(_literals(extra, env))

    def __call__(self, text: str) -> str:
        return redact_literals(text, self.literals)


def redact_literals(text: str, literals: tuple[str, ...]) -> str:
    """`text` masked as `Redactor` masks it, against these literal secrets (longest first:
    a `Redactor`'s `literals`) and no others."""
    return _redact(text, literals) if text else text


# Every pattern needs one of these (in lower case) to match: text without any is skipped.
_TRIGGERS = ("hf_", "api_org_", "sk-ant-", "token", "key", "secret", "passw", "bearer",
             "authorization")


def _redact(text: str, literals: Iterable[str]) -> str:
    for value in literals:
        if value in text:
            text = text.replace(value, MASK)
    low = text.lower()
    if not any(t in low for t in _TRIGGERS):
        return text
    for rx in _PATTERNS:
        if rx.groups:
            text = rx.sub(_keep_name, text)
        else:
            text = rx.sub(MASK, text)
    return text


# Tokenizer settings such as `pad_token: <pad>` name tokens, not credentials.
_TOKENIZER_NAMES = re.compile(
    r"(?i)(?:pad|eos|bos|unk|sep|cls|mask|special|chat)_tokens?[\"']?\s*(?:[:=]|$)")


def _keep_name(m: re.Match) -> str:
    if _TOKENIZER_NAMES.search(m.group(1)):
        return m.group(0)
    return m.group(1) + MASK


def redact_lines(
    lines: Iterable[str], extra: Iterable[object] = (), *, env: Mapping[str, str] | None = None
) -> list[str]:
    """`redact` of each line; the environment is read once for all of them."""
    literals = _literals(extra, env)
    return [_redact(line, literals) if line else line for line in lines]


class StreamRedactor:
    """Masks text that arrives in pieces (a streamed answer) so that a secret split
    across pieces is masked too. Append what it returns, in order:

        r = StreamRedactor()
        for piece in stream:
            show(r.feed(piece))
        show(r.flush())

    `feed` hands out the masked text up to the last whitespace seen (a word still
    arriving may be the start of a secret: it is held); `flush` the rest at the end.
    Each call masks the whole text so far, so `name: value` and `Bearer value` are
    recognised across pieces; what was handed out is kept as it was, and what follows
    continues it (what a later piece changes in it, if anything, is handed out again).
    """

    __slots__ = ("_literals", "_raw", "_shown")

    def __init__(self, extra: Iterable[object] = (), *, env: Mapping[str, str] | None = None):
        self._literals = _literals(extra, env)
        self._raw = ""  # everything received
        self._shown = ""  # the masked text handed out so far

    def feed(self, piece: str) -> str:
        if not piece:
            return ""
        self._raw += piece
        cut = max(self._raw.rfind(c) for c in " \t\n\r")
        if cut < 0:
            return ""
        return self._advance(_redact(self._raw[: cut + 1], self._literals))

    def flush(self) -> str:
        return self._advance(_redact(self._raw, self._literals)) if self._raw else ""

    def _advance(self, masked: str) -> str:
        shown = self._shown
        if len(masked) <= len(shown) and shown.startswith(masked):
            return ""  # nothing new
        common = len(os.path.commonprefix([shown, masked]))
        self._shown = masked
        return masked[common:]
