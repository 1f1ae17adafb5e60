"""Card-name normalisation: the one rule that maps an upload's name and a printing's name to a key."""

from __future__ import annotations

import re
import unicodedata

_EXTENSION = re.compile(r"\.(png|jpe?g|webp|gif|bmp|tiff?)$", re.IGNORECASE)
_COPY_SUFFIX = re.compile(r"\s*(-\s*copy(\s*\(\d+\))?|\(\d+\)|\bcopy)\s*$", re.IGNORECASE)
_COPY_PREFIX = re.compile(r"^\s*copy of\s+", re.IGNORECASE)
_JOINERS = re.compile(r"[-_/]+")
_DROPPED = re.compile(r"[^\w\s]")
_SPACES = re.compile(r"\s+")
# Apostrophes vanish ("Fell Beast's" = "Fell Beasts"); every other punctuation mark becomes a space.
_APOSTROPHES = dict.fromkeys(map(ord, "'’‘ʼ`"), None)
# Latin letters that Unicode does not decompose into a base letter and an accent.
_LATIN_LETTERS = str.maketrans({"æ": "ae", "œ": "oe", "ø": "o", "ł": "l", "đ": "d", "ı": "i", "þ": "th"})
_LATIN_END = 0x250  # accents are dropped from Latin letters only: Japanese and Cyrillic marks are letters


def normalize_name(name: str) -> str:
    """Case-folded, Latin accents and punctuation removed, single spaces.

    ``"Jötun Grunt"`` -> ``"jotun grunt"``, ``"Æther Vial"`` -> ``"aether vial"``,
    ``"Straßenkämpfer"`` -> ``"strassenkampfer"``; printed names in other scripts keep their letters.
    """
    kept: list[str] = []
    for ch in unicodedata.normalize("NFKD", name):
        if unicodedata.combining(ch) and kept and ord(kept[-1][-1]) < _LATIN_END:
            continue
        kept.append(ch)
    text = unicodedata.normalize("NFC", "".join(kept)).casefold().translate(_LATIN_LETTERS)
    text = text.translate(_APOSTROPHES)
    text = _JOINERS.sub(" ", text)
    text = _DROPPED.sub(" ", text).replace("_", " ")
    return _SPACES.sub(" ", text).strip()


def face_names(name: str) -> list[str]:
    """The faces of a multi-face name (``"Front // Back"``); a single-face name gives itself."""
    return [part.strip() for part in name.split("//") if part.strip()]


def strip_upload_noise(name: str) -> str:
    """Remove what file uploads add to a name: an image extension, ``" (1)"``, ``" - Copy"``, ``"Copy of "``."""
    text = name.strip()
    while True:
        stripped = _COPY_PREFIX.sub("", _COPY_SUFFIX.sub("", _EXTENSION.sub("", text))).strip()
        if stripped == text:
            return text
        text = stripped


def collapse(normalized: str) -> str:
    """The spaceless form used to undo names whose spaces were lost (``"lightningbolt"``)."""
    return normalized.replace(" ", "")
