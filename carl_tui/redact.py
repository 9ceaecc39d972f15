"""Remove secrets from text before it is shown, saved or sent anywhere.

Masks Hugging Face tokens (`hf_...`), Anthropic keys (`sk-ant-...`),
`Authorization:` / `Bearer` credentials, `key=value` pairs whose key names a
secret, and the literal value of every environment variable whose name
contains TOKEN, KEY, SECRET or PASSWORD.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

MASK = "[REDACTED]"
SECRET_NAME_PARTS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
MIN_SECRET_LEN = 6  # shorter env values ("1", "true") are not worth masking and would shred text

_PATTERNS = (
    # Anthropic keys: sk-ant-api03-..., sk-ant-admin01-...
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    # Hugging Face user / org / api tokens.
    re.compile(r"\b(?:hf|api_org)_[A-Za-z0-9]{8,}\b"),
    # Authorization headers in any case, any scheme: keep the header name.
    re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;}]+"),
    # Bearer credentials on their own.
    re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/=\-]{6,}"),
    # x-api-key: ... headers.
    re.compile(r"(?i)(\bx-api-key\b[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+"),
    # NAME=value / "name": "value" where the name speaks of a secret.
    re.compile(
        r"(?i)(\b[A-Za-z0-9_.\-]*(?:token|api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key"
        r"|secret|password|passwd)[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED\])(?![\d.eE+\-]+\b)"
        r"[^\s\"',;}]{4,}"
    ),
)


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(part in upper for part in SECRET_NAME_PARTS)


def env_secrets(env: Mapping[str, str] | None = None) -> list[str]:
    """Values of the environment variables whose names say they are secret, longest first."""
    env = os.environ if env is None else env
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


def _redact(text: str, literals: list[str]) -> str:
    for value in literals:
        if value in text:
            text = text.replace(value, MASK)
    for rx in _PATTERNS:
        if rx.groups:
            text = rx.sub(_keep_name, text)
        else:
            text = rx.sub(MASK, text)
    return text


# Tokenizer settings such as `pad_token: <pad>` name tokens, not credentials.
_TOKENIZER_NAMES = re.compile(r"(?i)(?:pad|eos|bos|unk|sep|cls|mask|special|chat)_tokens?[\"']?\s*[:=]")


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
