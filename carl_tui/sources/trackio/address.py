"""What the user typed for `--trackio`: a Trackio server's base URL and the project
named in it, and which hosts are loopback (polled often) or Hugging Face's (sent the
token). Only the standard library: the CLI checks `--trackio` with it before the
dashboard's first frame, and `remote.py` (httpx) loads after it.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import parse_qs, urlsplit

_HF_HOST_SUFFIXES = (".hf.space", "huggingface.co", ".hf.co")
_SPACE_URL = re.compile(
    r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/spaces/([^/]+)/([^/?#]+)")


def normalize_url(url: str) -> str:
    """`user/space` -> `https://user-space.hf.space`; full URLs are left alone.

    Also accepts `huggingface.co/spaces/user/space` and `host:port`.
    """
    u = url.strip().rstrip("/")
    m = _SPACE_URL.match(u)
    if m:
        return _space_url(m.group(1), m.group(2))
    if "://" in u:
        return u
    if re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", u) and ":" not in u:
        user, space = u.split("/")
        return _space_url(user, space)
    host = u.split("/")[0].rsplit(":", 1)[0]
    return ("http://" if _is_loopback(host) else "https://") + u


def parse_server(text: str) -> tuple[str, str | None]:
    """What the user typed for `--trackio` -> (base URL, project named in it, if any).

    Accepts `user/space`, `https://user-space.hf.space`, `huggingface.co/spaces/user/space`,
    `host:port`, and the URL `trackio show` prints (`http://127.0.0.1:7860/?project=X`).
    Raises ValueError with a sentence naming what is wrong.
    """
    text = (text or "").strip()
    if not text:
        raise ValueError("needs a Trackio server: user/space, https://user-space.hf.space "
                         "or http://host:port")
    if "://" in text and not text.lower().startswith(("http://", "https://")):
        scheme = text.split("://", 1)[0]
        raise ValueError(f"{scheme}:// is not supported: use http:// or https://")
    try:
        parts = urlsplit(normalize_url(text))
        port = parts.port  # raises ValueError for a port that is not a number in range
        host = parts.hostname
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid URL ({exc})") from None
    if not host:
        raise ValueError(f"{text!r} has no host name")
    if port == 0:
        raise ValueError(f"{text!r}: port 0 is not a server port")
    project = parse_qs(parts.query).get("project", [None])[0] or None
    path = parts.path.rstrip("/")
    netloc = parts.netloc
    return f"{parts.scheme}://{netloc}{path}", project


def _space_url(user: str, space: str) -> str:
    sub = re.sub(r"[^a-z0-9-]", "-", f"{user}-{space}".lower())
    return f"https://{sub}.hf.space"


def _is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_local(url: str) -> bool:
    """True for loopback URLs (polled every second rather than every 3 s)."""
    return _is_loopback(urlsplit(normalize_url(url)).hostname or "")


def is_hf_host(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return any(host == s.lstrip(".") or host.endswith(s) for s in _HF_HOST_SUFFIXES)
