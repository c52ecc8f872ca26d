"""Text hygiene for anything that is stored or shown to a model.

Stored strings reach a system prompt and Discord messages, so control characters,
bidirectional overrides and zero-width characters are removed: they can hide
instructions from a human reviewer or reorder what staff read.

Stored text is data wherever it goes (docs/architecture.md, invariant 11): `quote_for_prompt` is the only form
in which it enters a prompt, `as_discord_text` the only form in which Discord shows it,
and `markup_in` names the markup that `/memory remember` and staff pins refuse to store.
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
# Line and paragraph separators count as line breaks: each can start a line of its own.
_LINES_RE = re.compile(r"\s*[\n\u2028\u2029]\s*")


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


# Stored text in a prompt --------------------------------------------------------------

# What each character becomes inside a quoted value. Backslash and double quote are escaped
# as in a JSON string, so nothing can end the quote early. Angle brackets become single
# guillemets, so no stored text can hold a tag: it cannot close the memory block, open
# another, or forge any other <...> marker. Their fullwidth and small forms (which NFKC
# folds to them), the ones that decompose to them (≮ ≯) and their usual lookalikes count
# as angle brackets, and the fullwidth and small quote and backslash as those.
_LEFT_ANGLES = "<\uff1c\ufe64\u226e\u02c2\u1438\u2329\u27e8\u3008\u276e"  # <＜﹤≮˂ᐸ〈⟨〈❮
_RIGHT_ANGLES = ">\uff1e\ufe65\u226f\u02c3\u1433\u232a\u27e9\u3009\u276f"  # >＞﹥≯˃ᐳ〉⟩〉❯
_PROMPT_ESCAPES = {
    **dict.fromkeys("\\\uff3c\ufe68", "\\\\"),  # \ ＼ ﹨
    **dict.fromkeys('"\uff02', '\\"'),  # " ＂
    **dict.fromkeys(_LEFT_ANGLES, "\u2039"),  # ‹
    **dict.fromkeys(_RIGHT_ANGLES, "\u203a"),  # ›
}
_AS_ANGLES = str.maketrans(dict.fromkeys(_LEFT_ANGLES, "<") | dict.fromkeys(_RIGHT_ANGLES, ">"))


def quote_for_prompt(text: str, limit: int | None = None) -> str:
    """Stored text as one quoted, escaped value on a single line, the only form in which it
    enters a prompt.

    The text is scrubbed, every run of whitespace (line and paragraph separators included)
    becomes one space, backslash and double quote are escaped as in JSON and angle brackets
    become ‹ ›, each with the forms that fold to it or look like it. So the value never
    spans lines, never ends before its closing quote, and can pass neither for a heading, a
    list item or a role label (it never starts a line) nor for a tag. With `limit` (3 or
    more), the whole value, quotes included, is at most that long: the text is cut, never
    the quote.
    """
    plain = " ".join(scrub(text).split())
    pieces = [_PROMPT_ESCAPES.get(char, char) for char in plain]
    if limit is not None and sum(map(len, pieces)) + 2 > limit:
        room = max(limit - 3, 0)  # the two quotes and the ellipsis
        kept: list[str] = []
        for piece in pieces:
            if len(piece) > room:
                break
            kept.append(piece)
            room -= len(piece)
        pieces = ["".join(kept).rstrip(), "…"]
    return '"' + "".join(pieces) + '"'


# Markup that /memory remember and staff pins refuse, checked on the NFKC-folded, case-folded
# text, with a description for the refusal. Stored text is plain text: none of it is needed
# to state a fact, and each is a way to pass for the prompt's structure or for Discord's.
_MARKUP: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"</|<[a-z@#&:!?/][^<>]*>"), "tags such as <…>"),
    (re.compile(r"\[[^\]]*\]\s*\("), "markdown links such as [text](url)"),
    (re.compile(r"```"), "code blocks"),
    (re.compile(r"^\s*(?:#{1,6}\s|-#\s|>{1,3}\s)"), "heading or quote markers at the start"),
    # A role label that opens the text or a sentence; "operating system: Linux" is plain.
    (
        re.compile(r"(?:^|[.!?;]\s*)(?:system|assistant|developer)\s*:"),
        "role labels such as SYSTEM:",
    ),
)


def markup_in(text: str, headings: tuple[str, ...] = ()) -> str | None:
    """What markup the text holds, described for a refusal, or None for plain text.

    `headings` are further strings the text must not hold (the memory block's own headings).
    """
    folded = unicodedata.normalize("NFKC", scrub(text)).casefold().translate(_AS_ANGLES)
    for pattern, description in _MARKUP:
        if pattern.search(folded):
            return description
    if any(heading.casefold() in folded for heading in headings):
        return "the memory block's own headings"
    return None


# Stored text in Discord ---------------------------------------------------------------

# Mention syntax: the sigil becomes its fullwidth form, which Discord renders as text.
_EVERYONE_RE = re.compile(r"@(?=(?:everyone|here)\b)", re.IGNORECASE)
_MENTION_SIGIL_RE = re.compile(r"<([@#])")
_FULLWIDTH_SIGIL = {"@": "\uff20", "#": "\uff03"}
# A bare URL: shown between < and >, which Discord links without an embed.
_URL_RE = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s<>]+", re.IGNORECASE)
_URL_TRAILING = ".,:;!?'\"*_~|`"
# Characters that format wherever they are, and those that do only at the start of a line.
_MARKDOWN_CHARS_RE = re.compile(r"[\\*_~`|<>\[\]#]|(?<=\])\(")
_LINE_START_RE = re.compile(r"^([ \t]*)(?:([-+])|(\d+)(\.))", re.MULTILINE)


def _url_and_tail(url: str) -> tuple[str, str]:
    """A URL without the punctuation that ends the sentence around it."""
    end = len(url)
    while end > 0:
        char = url[end - 1]
        if char in _URL_TRAILING or (
            char in ")]"
            and url.count("(" if char == ")" else "[", 0, end) < url.count(char, 0, end)
        ):
            end -= 1
            continue
        break
    return url[:end], url[end:]


def as_discord_text(text: str, *, markdown: bool = True) -> str:
    """Stored text as Discord shows it to others: text, never formatting, links or mentions.

    Mentions lose their sigil (`@everyone` becomes `＠everyone`, `<@&1>` becomes `<＠&1>`),
    so nothing renders as a mention. With `markdown` (message content), every character
    Discord formats with is escaped with a backslash, which Discord renders as the plain
    character: emphasis, strike, spoilers, code, quotes, headings and subtext, masked links
    (`[`, `]` and the `(` after `]`), tags such as `<t:…>` or `</cmd:…>`, and lists at the
    start of a line. Bare URLs are shown as `<url>`: still visible, never embedded. Without
    `markdown` (autocomplete choices, which Discord shows as plain text) only the mentions
    are changed.
    """
    text = _EVERYONE_RE.sub("\uff20", text)
    text = _MENTION_SIGIL_RE.sub(lambda m: "<" + _FULLWIDTH_SIGIL[m.group(1)], text)
    if not markdown:
        return text
    out: list[str] = []
    start = 0
    for match in _URL_RE.finditer(text):
        url, tail = _url_and_tail(match.group())
        out.append(_MARKDOWN_CHARS_RE.sub(_escaped, text[start : match.start()]))
        out.append(f"<{url}>")
        start = match.end() - len(tail)
    out.append(_MARKDOWN_CHARS_RE.sub(_escaped, text[start:]))
    return _LINE_START_RE.sub(_escaped_line_start, "".join(out))


def _escaped(match: re.Match[str]) -> str:
    return "\\" + match.group()


def _escaped_line_start(match: re.Match[str]) -> str:
    indent, bullet, number, dot = match.groups()
    return indent + ("\\" + bullet if bullet else number + "\\" + dot)


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


# Long text as Discord messages ---------------------------------------------------------

# Discord's limit on a message's content, in characters.
DISCORD_MESSAGE_CHARS = 2000
# A sentence ends at . ! ? or … (closing quotes and brackets included), before whitespace;
# a line break ends one too.
_SENTENCE_END_RE = re.compile(r"[.!?…][\"'’”»)\]]*(?=\s)|(?=\n)")
_WHITESPACE_RE = re.compile(r"\s+")
# Never the first character of a chunk: it belongs to the character before it.
_JOINERS = "\u200d\ufe0e\ufe0f"


def split_message(text: str, limit: int = DISCORD_MESSAGE_CHARS) -> list[str]:
    """`text` in chunks of at most `limit` characters, none empty or blank.

    A chunk ends at a sentence end (or a line break) when one lies in the second half of the
    room left, else at whitespace there, else at the limit. Only the whitespace at a cut is
    dropped (and around the whole text): every other character is kept, in order.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    chunks: list[str] = []
    rest = text.strip()
    while len(rest) > limit:
        cut = _cut(rest, limit)
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        chunks.append(rest)
    return chunks


def _cut(text: str, limit: int) -> int:
    """Where to end the next chunk of `text` (longer than `limit`, no outer whitespace)."""
    # One character past the room, so a sentence end at the limit sees its whitespace.
    window = text[: limit + 1]
    least = max(limit // 2, 1)
    for pattern in (_SENTENCE_END_RE, _WHITESPACE_RE):
        ends = [m.end() if m.group().strip() else m.start() for m in pattern.finditer(window)]
        fitting = [end for end in ends if least <= end <= limit]
        if fitting:
            return fitting[-1]
    cut = limit
    # A hard cut keeps a combining mark or a joiner with the character it belongs to.
    while cut > 1 and (
        unicodedata.combining(text[cut]) or text[cut] in _JOINERS or text[cut - 1] == "\u200d"
    ):
        cut -= 1
    return cut
