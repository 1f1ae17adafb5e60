"""A synthetic canonical catalogue: sets and printings, some names reprinted across sets."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import date

LANGS_OTHER = ("de", "fr", "it", "es")
RARITIES = ("C", "U", "R", "M")
_SYLLABLES = (
    "ar", "bel", "cor", "dra", "eth", "fal", "gor", "hal", "ith", "jor", "kel", "lum", "mor", "nar",
    "oth", "pra", "quel", "ros", "sil", "tor", "ul", "vor", "wyn", "xan", "yor", "zel",
)
_NOUNS = (
    "Wurm", "Angel", "Sphinx", "Bolt", "Ritual", "Growth", "Counterspell", "Knight", "Dragon", "Golem",
    "Elemental", "Shaman", "Rogue", "Wall", "Titan", "Oracle", "Drake", "Hydra", "Vampire", "Sliver",
)
_FIRST = ("Anna", "Boris", "Chen", "Dara", "Elio", "Fiona", "Goran", "Hana", "Ivo", "Jules", "Kira",
          "Lars", "Mira", "Nils", "Olga", "Pavel", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wade")
_LAST = ("Adler", "Brandt", "Castillo", "Dorn", "Ekholm", "Fischer", "Grant", "Holm", "Ibsen", "Jensen",
         "Kovacs", "Lund", "Moreau", "Novak", "Ortiz", "Petrov", "Quinn", "Reyes", "Stone", "Varga")


@dataclass(frozen=True)
class SetSpec:
    code: str          # upper case as printed
    name: str
    released: date
    style: str         # "old" (no collector number), "pre2015" (Illus. line, then the legal line ending 123/350 R),
                       # "slash" (041/281 C over DMU • EN), "rarity" (C 0100 over FDN • EN)
    frame: str
    size: int


@dataclass(frozen=True)
class PrintingSpec:
    key: str
    set_code: str
    name: str
    collector_number: str   # as the catalogue stores it: no leading zeros
    lang: str
    rarity: str
    artist: str
    border_color: str
    frame: str
    style: str
    released: date
    set_size: int
    art_seed: int


def _set_code(rng: random.Random, taken: set[str]) -> str:
    letters = "ABCDEFGHJKLMNPRSTUVWXYZ"
    while True:
        length = rng.choice((3, 3, 3, 3, 4))
        code = "".join(rng.choice(letters) for _ in range(length))
        if rng.random() < 0.15:
            pos = rng.randrange(length)
            code = code[:pos] + rng.choice("123456789") + code[pos + 1:]
        if code not in taken:
            taken.add(code)
            return code


def _card_name(rng: random.Random) -> str:
    first = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((2, 2, 3)))).capitalize()
    return f"{first}'s {rng.choice(_NOUNS)}" if rng.random() < 0.3 else f"{first} {rng.choice(_NOUNS)}"


# The style of set i is STYLE_CYCLE[i % len]: one old frame in eight, the rest modern.
STYLE_CYCLE = ("old", "slash", "slash", "slash", "rarity", "slash", "slash", "rarity")
# Every collector-line format alike, for the photo-like corpus.
EVERY_STYLE_CYCLE = ("old", "pre2015", "slash", "rarity")


def _set_style(rng: random.Random, style: str) -> tuple[str, str, int]:
    """The style, Scryfall frame and release year of a set printed in ``style``."""
    if style == "old":
        return style, rng.choice(("1993", "1997")), rng.randint(1994, 2002)
    if style == "pre2015":
        return style, "2003", rng.randint(2008, 2014)
    if style == "slash":
        return style, "2015", rng.randint(2015, 2023)
    return style, "2015", rng.randint(2024, 2025)


def build_catalogue(rng: random.Random, printings: int, *,
                    styles: tuple[str, ...] = STYLE_CYCLE) -> tuple[list[SetSpec], list[PrintingSpec]]:
    """``printings`` printings over enough sets; about a third of the names appear in several sets."""
    set_count = max(6, printings // 20)
    taken: set[str] = set()
    sets: list[SetSpec] = []
    for i in range(set_count):
        style, frame, year = _set_style(rng, styles[i % len(styles)])
        code = _set_code(rng, taken)
        sets.append(SetSpec(code=code, name=f"{_card_name(rng).split()[0]} Saga {i + 1}",
                            released=date(year, rng.randint(1, 12), rng.randint(1, 28)),
                            style=style, frame=frame, size=rng.randint(180, 420)))

    artists = [f"{rng.choice(_FIRST)} {rng.choice(_LAST)}" for _ in range(max(10, printings // 6))]
    names = [_card_name(rng) for _ in range(max(4, int(printings * 0.7)))]
    used: set[tuple[str, str, str]] = set()
    specs: list[PrintingSpec] = []
    while len(specs) < printings:
        s = rng.choice(sets)
        # Reuse an earlier name a third of the time so reprints exist and the set code matters.
        name = rng.choice([p.name for p in specs]) if specs and rng.random() < 0.33 else rng.choice(names)
        number = str(rng.randint(1, s.size))
        lang = rng.choice(LANGS_OTHER) if s.style != "old" and rng.random() < 0.08 else "en"
        if (s.code, number, lang) in used:
            continue
        used.add((s.code, number, lang))
        border = "white" if s.style == "old" and rng.random() < 0.4 else rng.choice(
            ("black",) * 6 + ("borderless", "silver")
        )
        specs.append(PrintingSpec(
            key=f"{s.code.lower()}-{number}-{lang}", set_code=s.code, name=name, collector_number=number,
            lang=lang, rarity=rng.choice(RARITIES), artist=rng.choice(artists), border_color=border,
            frame=s.frame, style=s.style, released=s.released, set_size=s.size,
            art_seed=rng.randrange(1 << 31),
        ))
    return sets, specs
