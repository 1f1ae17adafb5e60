"""The pure extractors of the manifest. Each reads the localised card (``localise``: upright, in
the card frame) and returns its own fields, or a named skip reason; none touches the database or
keeps pixels."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
from PIL import Image, ImageStat

from ..catalog.collector_line import LineParse, parse_collector_rows, shows_several_cards
from ..catalog.evidence_facts import GRADED_SLAB, SEVERAL_CARDS
from ..catalog.printed_keys import PrintedKeys
from .geometry import BleedClass, all_boxes, box_px, classify_bleed, trim_box
from .hashing import phash_int
from .localise import CONFIDENCE_BAR, Localised, card_with_margin, localise_card, room_for_another_card
from .parse import parse_artist, parse_artist_after_language, parse_legal, prints_no_number
from .set_symbol import read_symbol_shape
from .text_reader import CARD_MARGIN, CARD_MIN_SIDE, CardText, join_rows, lines_side_by_side, read_card_text

# Which evidence columns each extractor owns; a recompute of one key rewrites only these.
FIELDS_BY_KEY: dict[str, tuple[str, ...]] = {
    "fetch_health": ("fetch_ok", "fetch_error_class", "fetch_latency_ms", "image_format", "byte_size", "md5",
                     "sha256"),
    "card_localisation": ("card_quad", "localisation_confidence", "localisation_rotation", "localisation_tilt_deg",
                          "localisation_method"),
    "geometry_bleed": ("width", "height", "aspect_ratio", "bleed_class"),
    "layout_class": ("layout_class", "layout_confidence"),
    "crop_coordinates": ("crops",),
    "collector_line_ocr": ("collector_line_raw_text", "collector_set_code", "collector_number",
                           "collector_language"),
    "collector_line_word_boxes": ("collector_word_boxes",),
    "artist_ocr": ("artist_raw_text", "artist_name", "illus_anchor_fired"),
    "symbol_region": ("symbol_phash",),
    "art_phash": ("art_phash",),
    "legal_line": ("legal_raw_text", "copyright_year", "proxy_marker"),
    "quality_signals": ("is_truncated", "blur_variance", "entropy"),
    "color_profile": ("color_mean_rgb", "color_stddev_rgb"),
    "title_ocr": ("title_text", "title_confidence"),
    "set_symbol": ("symbol_shape",),
}

Outcome = tuple[dict[str, Any], str | None]


# Extractors whose values do not depend on which way up the card is (a 180 turn keeps its edges).
ORIENTATION_FREE = frozenset({"fetch_health", "geometry_bleed", "layout_class", "quality_signals", "color_profile"})
# The reader takes the text's up over the localiser's only when it saw at least this many lines.
TEXT_LINES_TO_TURN = 4


@dataclass
class ImageContext:
    """The upload, the card found in it, and what several extractors share, computed at most once.

    ``image`` is the localised card (``localisation.card``), which the geometry, border and hash
    extractors read; the text is read from it too when the localiser is sure of the card, else from
    ``upload`` itself, wherever the text is. Without a localisation (a caller that built the context
    from a card image itself) the image is taken as the card.
    """

    image: Image.Image
    lexicon: frozenset[str] | None
    localisation: Localised | None = None
    keys: PrintedKeys | None = None
    upload: Image.Image | None = None
    cheap: bool = False  # the cheap pass of the reader (settings.ocr_pass "cheap")
    upload_size: tuple[int, int] | None = None  # the upload's own size when it was decoded smaller
    _text: CardText | None = field(default=None, repr=False)
    _parse: LineParse | None = field(default=None, repr=False)

    @classmethod
    def from_upload(cls, upload: Image.Image, lexicon: frozenset[str] | None, *,
                    orient_by_text: bool = True, keys: PrintedKeys | None = None,
                    cheap: bool = False, upload_size: tuple[int, int] | None = None) -> ImageContext:
        """The card found in ``upload``; ``orient_by_text`` False skips reading the text (a recompute
        of extractors that do not depend on which way up the card is)."""
        localised = localise_card(upload)
        ctx = cls(localised.card, lexicon, localised, keys=keys, upload=upload, cheap=cheap, upload_size=upload_size)
        if not orient_by_text:
            return ctx
        text = ctx.text()
        if localised.method not in (SEVERAL_CARDS, GRADED_SLAB) and (
                text.side_by_side or shows_several_cards(text.rows("collector"), lexicon)
                or (text.on_card and room_for_another_card(localised) and lines_side_by_side(upload))):
            # The localiser found one card, but the text is that of several.
            ctx.localisation = replace(localised, method=SEVERAL_CARDS, confidence=0.0)
            return ctx
        return ctx.upright_by_text() if localised.method == "contour" else ctx

    def upright_by_text(self) -> ImageContext:
        """Upright or turned 180 degrees, decided by the text as well as the rules panel.

        The localiser turns a card by where its light rules panel is; pale art over a dark panel
        fools it. The reader knows which way the text runs; when it saw enough lines and the
        localiser's turn is half a turn off it, the card is turned, before any extractor records
        anything.
        """
        text = self.text()
        assert self.localisation is not None
        if text.detected < TEXT_LINES_TO_TURN:
            return self
        if text.on_card:  # read on the card itself: its text's up is the card's
            if text.rotation != 180:
                return self
        elif ((360 - text.rotation) % 360 - self.localisation.rotation) % 360 != 180:
            return self
        turned_card = self.image.rotate(180)
        q = self.localisation.quad
        return ImageContext(turned_card, self.lexicon, replace(
            self.localisation, card=turned_card, quad=(q[2], q[3], q[0], q[1]),
            rotation=(self.localisation.rotation + 180) % 360), keys=self.keys, upload=self.upload,
            cheap=self.cheap, upload_size=self.upload_size, _text=self._text, _parse=self._parse)

    @property
    def sure_of_card(self) -> bool:
        """The image holds the card: its outline found with confidence, or an upload with a card's own
        aspect (a render, a scan), which is the card."""
        found = self.localisation
        return found is not None and (found.method == "whole-image" or (
            found.method == "contour" and found.confidence >= CONFIDENCE_BAR))

    def text(self) -> CardText:
        """The card's text, read once: the two ends first, closer only when the catalogue confirms
        nothing read there. Read on the card when the localiser is sure of it, else on the upload.
        An upload taken whole for its aspect is usually a render or a scan, but can be a photo that
        happens to have a card's aspect: what the read on it does not settle is read again as an
        upload, unless it read the card's legal line. That prints at the card's foot, so a read that
        reached it saw the card whole (a render of a card printed without a number, 1998 and later: the
        read as an upload cost four more detections and found nothing). A read on it whose first look
        found almost no text goes to the read as an upload at once (``read_card_text``'s ``upload_next``)."""
        if self._text is None:
            on_card = self.sure_of_card and not self.cheap
            source = self.image if on_card or self.upload is None else self.upload
            whole = self.localisation is not None and self.localisation.method == "whole-image"
            if on_card and self.upload is not None and self.localisation is not None and not whole:
                source = card_with_margin(self.upload, self.localisation, CARD_MARGIN, CARD_MIN_SIDE)
            upload_next = on_card and whole  # read again as an upload unless settled or read to its legal line
            self._text = read_card_text(source, self._confirms, cheap=self.cheap, on_card=on_card,
                                        upload_next=upload_next)
            if upload_next and not self._confirms(self._text) and not self._text.legal_rows():
                self._text = read_card_text(self.upload if self.upload is not None else self.image,
                                            self._confirms, cheap=self.cheap)
        return self._text

    def _confirms(self, text: CardText) -> bool:
        """Whether what was read settles the collector end: a reading the catalogue confirms, or a legal
        line from before cards printed a number (a closer look would find none)."""
        rows = text.rows("collector")
        parse = parse_collector_rows(rows, self.lexicon)
        if parse.number is None and prints_no_number(rows):
            return True
        if self.keys is not None:
            return self.keys.confirms(parse)
        return parse.number is not None and parse.set_code_known

    def collector(self) -> LineParse:
        if self._parse is None:
            self._parse = parse_collector_rows(self.text().rows("collector"), self.lexicon)
        return self._parse

    @property
    def size(self) -> tuple[int, int]:
        return self.image.size

    @property
    def source_size(self) -> tuple[int, int]:
        if self.upload_size is not None:
            return self.upload_size
        return self.localisation.source_size if self.localisation is not None else self.image.size

    @property
    def bleed_class(self) -> BleedClass | None:
        if self.localisation is not None:
            return self.localisation.bleed_class
        return classify_bleed(*self.size)

    @property
    def localisation_confidence(self) -> float:
        return self.localisation.confidence if self.localisation is not None else 0.0

    def box(self, name: str) -> tuple[int, int, int, int]:
        return box_px(name, *self.size, self.bleed_class)

    @property
    def face_height(self) -> int:
        left, top, right, bottom = trim_box(*self.size, self.bleed_class)
        return bottom - top

    @property
    def ocr_passes(self) -> int:
        return len(self._text.passes) if self._text is not None else 0


def card_localisation(ctx: ImageContext) -> Outcome:
    """Where the card was found; a fallback (no card found, the whole upload used), several cards or a
    graded slab is a named skip."""
    if ctx.localisation is None:
        return {}, "not-localised"
    localised = ctx.localisation
    skip = {"fallback": "no-card-found", SEVERAL_CARDS: SEVERAL_CARDS, GRADED_SLAB: GRADED_SLAB}
    return localised.evidence(), skip.get(localised.method)


def geometry_bleed(ctx: ImageContext) -> Outcome:
    """The upload's own size and aspect, and the bleed class of the card found in it.

    Size and aspect describe the source (what was fetched); the bleed class describes the card
    (the quad, or the whole image when that is the card), so a photo whose aspect happens to be
    a print file's is not called ``bleed``.
    """
    width, height = ctx.source_size
    bleed = ctx.bleed_class
    fields = {"width": width, "height": height, "aspect_ratio": round(width / height, 5), "bleed_class": bleed}
    return fields, None if bleed else "ambiguous"


# Bands sampled for the border, as fractions of the card's width in from each trimmed edge. A
# printed border is about 4% of the width. A found quad can be a few percent loose (a sliver of
# table, stack or top-loader inside it), so each side takes the plainest of three insets.
BORDER_BANDS = ((0.01, 0.03), (0.03, 0.05), (0.05, 0.07))


def _side_bands(arr: np.ndarray, a: int, b: int) -> list[np.ndarray]:
    h, w = arr.shape[:2]
    inset_x, inset_y = round(w * 0.1), round(h * 0.1)
    return [
        arr[a:b, inset_x:w - inset_x].reshape(-1, 3), arr[h - b:h - a, inset_x:w - inset_x].reshape(-1, 3),
        arr[inset_y:h - inset_y, a:b].reshape(-1, 3), arr[inset_y:h - inset_y, w - b:w - a].reshape(-1, 3),
    ]


def _edge_bands(image: Image.Image, bleed_class: BleedClass | None) -> list[np.ndarray]:
    """Top, bottom, left and right border samples of the trimmed card: per side the plainest inset."""
    left, top, right, bottom = trim_box(image.width, image.height, bleed_class)
    arr = np.asarray(image)[top:bottom, left:right]  # only the bands become floats, not the whole card
    w = arr.shape[1]
    by_inset = [[band.astype(np.float32) for band in _side_bands(arr, round(w * a), max(round(w * a) + 2,
                                                                                        round(w * b)))]
                for a, b in BORDER_BANDS]
    return [min((bands[side] for bands in by_inset), key=lambda band: float(band.std(axis=0).mean()))
            for side in range(4)]


# A busy border band is what art reaching the edge looks like, and also what a sliver of table,
# stack or sleeve inside a loose quad looks like: a borderless reading counts for this much less,
# so it reaches the veto bar only with all four sides busy on a quad found with confidence >= 0.91.
BORDERLESS_WEIGHT = 0.55
# How much a majority of the four sides supports the colour: two sides (the other two each read
# something else), three, or all four. One spoilt side is common (a shadow, glare), two less so.
SIDE_AGREEMENT = {2: 0.75, 3: 0.9, 4: 1.0}


@dataclass(frozen=True)
class BorderReading:
    colour: str | None
    sides_agreeing: int   # of the four sides, how many read ``colour``

    @property
    def agreement(self) -> float:
        """How much the reading itself supports the colour (0-1): by how many sides agree
        (SIDE_AGREEMENT), less for a borderless reading (BORDERLESS_WEIGHT)."""
        if self.colour is None:
            return 0.0
        weight = BORDERLESS_WEIGHT if self.colour == "borderless" else 1.0
        return SIDE_AGREEMENT.get(self.sides_agreeing, 0.0) * weight


def read_border(image: Image.Image, bleed_class: BleedClass | None = None) -> BorderReading:
    """Border colour of the card ``image`` (the localised card, not the upload) from four bands just
    inside its trimmed edges (black, white, silver, borderless, or None when unclear), and how many
    of the four sides agree."""
    # A photo's white balance and light vary: brightness is taken relative to the card's own
    # highlights (its 95th percentile), so a shaded white border is still white, not silver.
    highlight = max(_percentile_of_levels(image.convert("L"), 95), 1.0)
    gain = 255.0 / max(highlight, 200.0)
    labels = [_band_colour(band * gain) for band in _edge_bands(image, bleed_class)]
    # A majority of the four sides: a photo's shadow, glare or a sliver of background spoils one
    # side, rarely two.
    counts = {label: labels.count(label) for label in set(labels)}
    ranked = sorted(counts.values(), reverse=True)
    top = max(counts, key=counts.__getitem__)
    if top is None or ranked[0] < 2 or (len(ranked) > 1 and ranked[1] == ranked[0]):
        return BorderReading(None, 0)
    return BorderReading(top, counts[top])


def _percentile_of_levels(gray: Image.Image, q: float) -> float:
    """``np.percentile`` of an 8-bit grey image's pixels, from its histogram: the same value (linear
    interpolation between the two nearest ranks) without sorting a card's million pixels."""
    counts = np.cumsum(gray.histogram())
    position = q / 100 * (int(counts[-1]) - 1)
    below, frac = int(math.floor(position)), position - math.floor(position)
    low = int(np.searchsorted(counts, below, side="right"))
    high = int(np.searchsorted(counts, below + 1, side="right")) if frac else low
    return low + frac * (high - low)


def classify_border(image: Image.Image, bleed_class: BleedClass | None = None) -> str | None:
    """The border colour alone (see :func:`read_border`)."""
    return read_border(image, bleed_class).colour


def _band_colour(band: np.ndarray) -> str | None:
    """One side's colour from its median (robust to a few stray pixels); a busy band is art: borderless."""
    if float(band.std(axis=0).mean()) > 28:
        return "borderless"
    rgb = np.median(band, axis=0)
    brightness = float(rgb.mean())
    saturation = float(rgb.max() - rgb.min())
    if brightness <= 60:
        return "black"
    if brightness >= 195:
        return "white"
    if 130 <= brightness < 195 and saturation <= 25:
        return "silver"
    return None


def layout_class(ctx: ImageContext) -> Outcome:
    """The border read on the card's own edge; ``layout_confidence`` is the localisation's times the
    reading's own agreement (sides that agree, less for borderless), so a reading taken where no card
    was found, or where the sides disagree, stays below ``LAYOUT_CONFIDENCE_BAR``: kept, but it must
    not veto a match."""
    border = read_border(ctx.image, ctx.bleed_class)
    confidence = round(ctx.localisation_confidence * border.agreement, 3) if border.colour else None
    fields = {"layout_class": border.colour, "layout_confidence": confidence}
    return fields, None if border.colour else "ambiguous"


def crop_coordinates(ctx: ImageContext) -> Outcome:
    return {"crops": all_boxes(*ctx.size, ctx.bleed_class)}, None


def collector_line_ocr(ctx: ImageContext) -> Outcome:
    """The collector line's set code, number and language, parsed from the rows at the collector end
    of the card's text (``catalog/collector_line.py`` knows the formats)."""
    parse = ctx.collector()
    fields = {
        "collector_line_raw_text": "\n".join(ctx.text().rows("collector"))[:2000],
        "collector_set_code": parse.set_code[:16] if parse.set_code else None,
        "collector_number": parse.number[:16] if parse.number else None,
        "collector_language": parse.language,
    }
    if parse.number is None:
        # Nothing of a collector block (old frames print none) is "no-text"; a partial block is "ambiguous".
        return fields, "ambiguous" if parse.set_code else "no-text"
    return fields, None


def collector_line_word_boxes(ctx: ImageContext) -> Outcome:
    """The collector end's lines with their boxes (upright card coordinates) and the recogniser's
    score as a 0-100 confidence."""
    boxes = [
        {"text": ln.text, "left": round(ln.left), "top": round(ln.top), "width": round(ln.width),
         "height": round(ln.height), "conf": round(ln.score * 100, 2)}
        for ln in ctx.text().at("collector")
    ]
    return {"collector_word_boxes": boxes}, None if boxes else "no-text"


def artist_ocr(ctx: ImageContext) -> Outcome:
    rows = ctx.text().rows("collector")
    text = "\n".join(rows)
    artist, illus = parse_artist(text)
    if artist is None:
        artist = next((name for row in rows if (name := parse_artist_after_language(row))), None)
    fields = {"artist_raw_text": text[:2000], "artist_name": artist, "illus_anchor_fired": illus}
    return fields, None if artist else "no-text"


def symbol_region(ctx: ImageContext) -> Outcome:
    left, top, right, bottom = ctx.box("symbol")
    if right - left < 4 or bottom - top < 4:
        return {"symbol_phash": None}, "ambiguous"
    return {"symbol_phash": phash_int(ctx.image.crop((left, top, right, bottom)))}, None


def art_phash_extractor(ctx: ImageContext) -> Outcome:
    return {"art_phash": phash_int(ctx.image.crop(ctx.box("art")))}, None


def legal_line(ctx: ImageContext) -> Outcome:
    rows = ctx.text().legal_rows()
    year, proxy = parse_legal("\n".join(rows))
    fields = {"legal_raw_text": "\n".join(rows)[:2000], "copyright_year": year, "proxy_marker": proxy}
    return fields, None if year or proxy else "no-text"


def laplacian_variance(gray: np.ndarray) -> float:
    """Variance of the 4-neighbour Laplacian: low on blurred images."""
    g = gray.astype(np.float32)
    lap = 4 * g[1:-1, 1:-1] - g[:-2, 1:-1] - g[2:, 1:-1] - g[1:-1, :-2] - g[1:-1, 2:]
    return float(lap.var())


def quality_signals(ctx: ImageContext) -> Outcome:
    gray = ctx.image.convert("L")
    w, h = gray.size
    interior = np.asarray(gray)[round(h * 0.05):round(h * 0.95), round(w * 0.05):round(w * 0.95)]
    return {"is_truncated": False, "blur_variance": round(laplacian_variance(interior), 3),
            "entropy": round(float(gray.entropy()), 5)}, None


def color_profile(ctx: ImageContext) -> Outcome:
    stat = ImageStat.Stat(ctx.image)
    return {"color_mean_rgb": [round(v, 3) for v in stat.mean],
            "color_stddev_rgb": [round(v, 3) for v in stat.stddev]}, None


# Mana symbols at the end of the title row read as digits or single letters ("Krosan Tusker 599"), or as
# a digit with a mark beside it ("Watcher in the Web 4+": the generic cost read on its own, at its width).
_TRAILING_SYMBOLS = re.compile(r"(?:\s+(?:[0-9]{1,4}|[A-Z0-9]{1,2}|[A-Z0-9]{0,3}[^\w\s]+[A-Z0-9]{0,3}))+$")


def title_ocr(ctx: ImageContext) -> Outcome:
    """The rows at the title end of the card's text (the name first), one per line, mana symbols cut
    off, for Stage D to match against the names the catalogue prints; ``title_confidence`` is the
    recogniser's mean score (0-100)."""
    lines = ctx.text().at("title")
    rows = [_TRAILING_SYMBOLS.sub("", row).strip() for row in join_rows(lines)]
    rows = [row for row in rows if row]
    confidence = round(100 * sum(ln.score for ln in lines) / len(lines), 2) if lines else None
    text = "\n".join(rows)[:200] or None
    return {"title_text": text, "title_confidence": confidence if text else None}, None if text else "no-text"


def set_symbol(ctx: ImageContext) -> Outcome:
    """The silhouette of the set symbol at the type line's right end (``set_symbol.py``), for Stage D to
    compare with the symbols of the sets a name was printed in; ``no-symbol`` where none is found
    (core sets before Sixth Edition print none)."""
    shape = read_symbol_shape(ctx.image, ctx.bleed_class)
    return {"symbol_shape": shape}, None if shape is not None else "no-symbol"


# Image extractors in manifest order; fetch_health is filled from the fetch itself.
IMAGE_EXTRACTORS: dict[str, Callable[[ImageContext], Outcome]] = {
    "card_localisation": card_localisation,
    "geometry_bleed": geometry_bleed,
    "layout_class": layout_class,
    "crop_coordinates": crop_coordinates,
    "collector_line_ocr": collector_line_ocr,
    "collector_line_word_boxes": collector_line_word_boxes,
    "artist_ocr": artist_ocr,
    "symbol_region": symbol_region,
    "art_phash": art_phash_extractor,
    "legal_line": legal_line,
    "quality_signals": quality_signals,
    "color_profile": color_profile,
    "title_ocr": title_ocr,
    "set_symbol": set_symbol,
}

# Extractor groups the benchmark reports separately.
EXTRACTOR_GROUPS: dict[str, tuple[str, ...]] = {
    "geometry": ("card_localisation", "geometry_bleed", "layout_class", "crop_coordinates"),
    "ocr": ("collector_line_ocr", "collector_line_word_boxes", "artist_ocr", "legal_line", "title_ocr"),
    "hashes": ("symbol_region", "art_phash", "set_symbol"),
    "signals": ("quality_signals", "color_profile"),
}
