"""Text hygiene for anything that is stored or shown to a model.

Stored strings reach a system prompt and Discord messages, so control characters,
bidirectional overrides and zero-width characters are removed: they can hide
instructions from a human reviewer or reorder what staff read.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Bidirectional embeddings/overrides/isolates and marks, zero-width characters, BOM.
_INVISIBLE = (
    "\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
    "\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\ufeff"
)
_INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]")
# C0 and C1 controls except tab and newline, and lone surrogates (invalid UTF-8 on the wire).
_CONTROL_RE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_SPACES_RE = re.compile(r"[ \t]+")
_LINES_RE = re.compile(r"\s*\n\s*")


def scrub(text: str, *, keep_newlines: bool = False) -> str:
    """Remove invisible and control characters and collapse whitespace."""
    text = _INVISIBLE_RE.sub("", text)
    text = _CONTROL_RE.sub("", text)
    text = _SPACES_RE.sub(" ", text)
    text = _LINES_RE.sub("\n", text) if keep_newlines else _LINES_RE.sub(" ", text)
    return text.strip()


# Text that would ping people, or pass for a mention, wherever it is shown or quoted.
_PINGS_RE = re.compile(r"@(everyone|here)\b|<@[!&]?\d+>|<#\d+>", re.IGNORECASE)


def has_pings(text: str) -> bool:
    """Whether the text holds @everyone/@here or a user, role or channel mention."""
    return _PINGS_RE.search(text) is not None


def clip(text: str, limit: int) -> str:
    """Cut to at most `limit` characters, marking the cut with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= 1:
        return text[:limit]
    return text[: limit - 1].rstrip() + "…"


def clean(text: str, limit: int) -> str:
    return clip(scrub(text), limit)


def normalized(text: str) -> str:
    """The form two texts are compared in: case-folded, NFKC, punctuation-light."""
    text = unicodedata.normalize("NFKC", scrub(text)).casefold()
    text = re.sub(r"[^\w\s]", "", text)
    return " ".join(text.split())


def content_hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


_ID_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i: staff type these


def short_id(digest_hex: str, length: int = 8) -> str:
    """A short, typeable id drawn from a hex digest."""
    value = int(digest_hex, 16)
    out = []
    for _ in range(length):
        value, rem = divmod(value, len(_ID_ALPHABET))
        out.append(_ID_ALPHABET[rem])
    return "".join(out)
