"""Seed a synthetic labelled corpus: a canonical catalogue, card images rendered from it, the
catalogue rows, and a ground-truth label file the pipeline never reads. Deterministic per seed."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import sqlalchemy as sa
from sqlalchemy.orm import Session

from ..catalog.models import Card, Expansion, Printing
from ..stage_c.hashing import art_phash, phash_int
from .catalogue import EVERY_STYLE_CYCLE, LANGS_OTHER, RARITIES, PrintingSpec, SetSpec, build_catalogue
from .photo import CONDITIONS, Wanted, photo_for, photograph, wanted_printing
from .render import Variant, bottom_lines, encode, render_card, render_face

BROKEN_KINDS = ("truncated", "not-an-image", "missing")
CLEAN_HEIGHT = 1040


@dataclass
class CorpusSummary:
    cards: int
    printings: int
    expansions: int
    images_dir: Path
    labels_path: Path
    broken: dict[str, int] = field(default_factory=dict)
    custom_art: int = 0
    old_frame: int = 0


def normalized_name(name: str) -> str:
    return " ".join("".join(ch for ch in name.lower() if ch.isalnum() or ch.isspace()).split())


def clean_render(p: PrintingSpec):  # type: ignore[no-untyped-def]
    """The canonical picture of a printing: trimmed, no noise, the reference for its hashes."""
    return render_face(p, Variant(height=CLEAN_HEIGHT))


def _variant(rng: random.Random, custom: bool) -> Variant:
    return Variant(
        height=rng.randint(850, 1250),
        bleed=rng.random() < 0.4,
        type_frac=rng.uniform(0.015, 0.02),
        blur=rng.choice((0.0, 0.0, 0.0, 0.5, 0.8)),
        noise=rng.choice((0.0, 0.0, 3.0, 6.0)),
        jpeg_quality=None if rng.random() < 0.12 else rng.choice((60, 70, 80, 90, 95)),
        art_seed=rng.randrange(1 << 31) if custom else None,
        proxy_marker=rng.random() < 0.05,
    )


def _load_catalogue(session: Session, sets: list[SetSpec], specs: list[PrintingSpec]) -> dict[str, int]:
    """Insert missing expansions and printings; returns printing key -> id."""
    expansion_ids = {code: eid for code, eid in session.execute(sa.select(Expansion.code, Expansion.id))}
    # A synthetic set is exactly what the corpus prints of it, so the catalogue holds it completely.
    numbers: dict[str, set[str]] = {}
    for p in specs:
        numbers.setdefault(p.set_code.lower(), set()).add(p.collector_number)
    for s in sets:
        code = s.code.lower()
        if code not in expansion_ids:
            exp = Expansion(code=code, name=f"{s.name} ({s.code})", released_at=s.released)
            session.add(exp)
            session.flush()
            expansion_ids[exp.code] = exp.id
        # The printed size is what the renderer prints after the number ("041/281").
        session.execute(sa.update(Expansion).where(Expansion.id == expansion_ids[code])
                        .values(card_count=len(numbers.get(code, ())), printed_size=s.size))
    existing = {
        (eid, number, lang): pid
        for eid, number, lang, pid in session.execute(
            sa.select(Printing.expansion_id, Printing.collector_number, Printing.lang, Printing.id)
        )
    }
    ids: dict[str, int] = {}
    for p in specs:
        eid = expansion_ids[p.set_code.lower()]
        pid = existing.get((eid, p.collector_number, p.lang))
        if pid is None:
            face = clean_render(p)
            row = Printing(
                expansion_id=eid, name=p.name, normalized_name=normalized_name(p.name),
                collector_number=p.collector_number, lang=p.lang, artist=p.artist, border_color=p.border_color,
                frame=p.frame, layout="normal", released_at=p.released, image_phash=phash_int(face),
                art_phash=art_phash(face),
            )
            session.add(row)
            session.flush()
            pid = row.id
        ids[p.key] = pid
    return ids


def seed_corpus(engine: sa.Engine, out_dir: Path, *, cards: int, seed: int = 0,
                broken_share: float = 0.05, progress: Callable[[int], None] | None = None,
                photo_like: bool = False) -> CorpusSummary:
    """Render ``cards`` card images under ``out_dir/images``, load the catalogue and the cards
    (``file://`` locators), and write ``out_dir/labels.jsonl``. The same seed gives the same corpus.
    ``progress`` is told of each card rendered (rendering is nearly all the time taken).

    ``photo_like`` renders phone-photo-like uploads instead, one condition of :data:`photo.CONDITIONS`
    per card in turn (every collector-line format, border and language; tilt, blur, glare, sleeves,
    clutter, JPEG, low resolution), each label naming its ``condition``; no broken files."""
    out_dir = Path(out_dir).resolve()
    images = out_dir / "images"
    images.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    if photo_like:
        sets, specs = build_catalogue(rng, max(40, int(cards * 0.75)), styles=EVERY_STYLE_CYCLE)
    else:
        sets, specs = build_catalogue(rng, max(10, int(cards * 0.75)))
    summary = CorpusSummary(cards=cards, printings=len(specs), expansions=len(sets), images_dir=images,
                            labels_path=out_dir / "labels.jsonl")
    if photo_like:
        rows, labels = _photo_like_cards(images, cards, seed, sets, specs, summary, progress)
    else:
        rows, labels = _upload_cards(images, cards, seed, specs, broken_share, summary, progress)
    summary.printings = len(specs)
    with Session(engine) as session, session.begin():
        _load_catalogue(session, sets, specs)
        known = set(session.execute(sa.select(Card.identifier).where(
            Card.identifier.in_([r["identifier"] for r in rows]))).scalars())
        fresh = [r for r in rows if r["identifier"] not in known]
        if fresh:
            session.execute(sa.insert(Card), fresh)
    with summary.labels_path.open("w", encoding="utf-8") as handle:
        for label in labels:
            handle.write(json.dumps(label, sort_keys=True) + "\n")
    return summary


Rows = list[dict[str, object]]


def _upload_cards(images: Path, cards: int, seed: int, specs: list[PrintingSpec], broken_share: float,
                  summary: CorpusSummary, progress: Callable[[int], None] | None) -> tuple[Rows, Rows]:
    """The default corpus: scans and renders as uploads vary, some broken on purpose."""
    labels: Rows = []
    rows: Rows = []
    for i in range(cards):
        crng = random.Random(f"card:{seed}:{i}")
        p = crng.choice(specs)
        custom = crng.random() < 0.05
        variant = _variant(crng, custom)
        broken = crng.choice(BROKEN_KINDS) if crng.random() < broken_share else None
        identifier = f"syn{seed}-{i:06d}"
        suffix = "png" if variant.jpeg_quality is None else "jpg"
        path = images / f"{identifier}.{suffix}"
        data: bytes | None
        if broken == "not-an-image":
            data = b"<html><body>503 Service Unavailable</body></html>\n"
        else:
            data = encode(render_card(p, variant, noise_seed=seed * 1_000_003 + i), variant)
            if broken == "truncated":
                data = data[: int(len(data) * crng.uniform(0.3, 0.7))]
        if broken == "missing":
            data = None
            path.unlink(missing_ok=True)
        else:
            assert data is not None
            path.write_bytes(data)
        declared = hashlib.sha256(data).hexdigest() if data is not None and crng.random() < 0.5 else None
        dpi = round(variant.height / (88 / 25.4))
        rows.append({"identifier": identifier, "name": p.name, "image_locator": path.as_uri(), "card_type": "card",
                     "dpi": dpi, "declared_content_hash": declared})
        if broken:
            summary.broken[broken] = summary.broken.get(broken, 0) + 1
        summary.custom_art += custom
        summary.old_frame += p.style == "old"
        labels.append({
            "identifier": identifier, "name": p.name, "printing_key": p.key, "set_code": p.set_code.lower(),
            "collector_number": p.collector_number, "lang": p.lang, "collector_line_printed": p.style != "old",
            "style": p.style, "frame": p.frame, "bleed_class": "bleed" if variant.bleed else "trimmed",
            "border_color": p.border_color, "artist": p.artist, "copyright_year": p.released.year,
            "proxy_marker": variant.proxy_marker, "custom_art": custom, "broken": broken,
            "height": variant.height, "type_frac": round(variant.type_frac, 5), "blur": variant.blur,
            "noise": variant.noise, "jpeg_quality": variant.jpeg_quality, "dpi": dpi,
        })
        if progress is not None:
            progress(1)
    return rows, labels


def _printing_for(rng: random.Random, wanted: Wanted, sets: list[SetSpec], specs: list[PrintingSpec]) -> PrintingSpec:
    """A printing ``wanted`` accepts: one of ``specs``, or a new one added to them (a reprint of a
    known name in a fitting set) when the catalogue drawn has none."""
    pool = [p for p in specs if wanted(p)]
    if pool:
        return rng.choice(pool)
    used = {(p.set_code, p.collector_number, p.lang) for p in specs}
    for s in rng.sample(sets, len(sets)):
        for border in ("black", "white", "borderless"):
            for lang in ("en", *LANGS_OTHER):
                number = str(rng.randint(1, s.size))
                p = PrintingSpec(
                    key=f"{s.code.lower()}-{number}-{lang}", set_code=s.code, name=rng.choice(specs).name,
                    collector_number=number, lang=lang, rarity=rng.choice(RARITIES), artist=rng.choice(specs).artist,
                    border_color=border, frame=s.frame, style=s.style, released=s.released, set_size=s.size,
                    art_seed=rng.randrange(1 << 31))
                if wanted(p) and (s.code, number, lang) not in used:
                    specs.append(p)
                    return p
    raise ValueError("no set of the catalogue can print the printing a condition asks for")


def _photo_like_cards(images: Path, cards: int, seed: int, sets: list[SetSpec], specs: list[PrintingSpec],
                      summary: CorpusSummary, progress: Callable[[int], None] | None) -> tuple[Rows, Rows]:
    """Photo-like uploads, card ``i`` of condition ``CONDITIONS[i % len]``, with labels to score them by."""
    labels: Rows = []
    rows: Rows = []
    for i in range(cards):
        crng = random.Random(f"photo-card:{seed}:{i}")
        condition = CONDITIONS[i % len(CONDITIONS)]
        p = _printing_for(crng, wanted_printing(condition), sets, specs)
        photo = photo_for(condition, crng)
        image, corners = photograph(p, photo, seed=seed * 1_000_003 + i)
        identifier = f"photo{seed}-{i:06d}"
        path = images / f"{identifier}.jpg"
        path.write_bytes(encode(image, Variant(height=photo.card_height, jpeg_quality=photo.jpeg_quality)))
        # A phone photo carries no scan resolution: no DPI, as real uploads of photos have none.
        rows.append({"identifier": identifier, "name": p.name, "image_locator": path.as_uri(), "card_type": "card",
                     "dpi": None, "declared_content_hash": None})
        summary.old_frame += p.style == "old"
        labels.append({
            "identifier": identifier, "condition": condition, "name": p.name, "printing_key": p.key,
            "set_code": p.set_code.lower(), "collector_number": p.collector_number, "lang": p.lang,
            "collector_line_printed": p.style != "old", "set_code_printed": p.style in ("slash", "rarity"),
            "printed_lines": [line for line in bottom_lines(p) if line], "style": p.style, "frame": p.frame,
            "bleed_class": "trimmed", "border_color": p.border_color, "artist": p.artist,
            "copyright_year": p.released.year, "broken": None, "width": image.width, "height": image.height,
            "card_corners": [[round(x, 1), round(y, 1)] for x, y in corners], **asdict(photo),
        })
        if progress is not None:
            progress(1)
    return rows, labels
