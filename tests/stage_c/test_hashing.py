"""The art hash is ImageHash's phash bit for bit, and reading a card does not load SciPy for it."""

from __future__ import annotations

import random
import subprocess
import sys

import imagehash
import numpy as np
import pytest
from PIL import Image

from stage_e_dagster.corpus.catalogue import build_catalogue
from stage_e_dagster.corpus.render import Variant, render_card, render_face
from stage_e_dagster.stage_c.hashing import art_crop, phash_int, signed64

_, SPECS = build_catalogue(random.Random(5), 40)


def imagehash_phash(image: Image.Image) -> int:
    """What every stored hash was made with before this module computed it itself."""
    return signed64(int(str(imagehash.phash(image.convert("L"), hash_size=8)), 16))


def renders() -> list[Image.Image]:
    """Card faces and uploads of every style, and their art crops."""
    images = []
    for i, spec in enumerate(SPECS[:12]):
        face = render_face(spec, Variant(height=700))
        upload = render_card(spec, Variant(height=800, bleed=i % 2 == 0, noise=4.0, blur=0.6), noise_seed=i)
        images += [face, art_crop(face), upload, art_crop(upload)]
    return images


def synthetic() -> list[Image.Image]:
    """Noise of odd sizes, flat images (a blank frame, a solid crop) and smooth gradients."""
    rng = np.random.default_rng(3)
    images = []
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(8, 240, 2))
        images.append(Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)))
        images.append(Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(0, 256, 3))))
        ramp = np.linspace(0, 255, w)[None, :, None]
        images.append(Image.fromarray(np.broadcast_to(ramp, (h, w, 3)).astype(np.uint8)))
    return images


@pytest.mark.parametrize("source", [renders, synthetic])
def test_phash_is_imagehashs_bit_for_bit(source) -> None:  # type: ignore[no-untyped-def]
    images = source()
    differ = [i for i, image in enumerate(images) if phash_int(image) != imagehash_phash(image)]
    assert not differ, f"{len(differ)} of {len(images)} images hash differently from ImageHash: {differ[:10]}"


def test_a_flat_image_hashes_as_imagehash_hashes_it() -> None:
    """Only the mean is set: rounding in the DCT must not give a flat image other bits."""
    assert phash_int(Image.new("RGB", (63, 88), (90, 40, 200))) == signed64(1 << 63)


def test_reading_a_card_does_not_import_scipy() -> None:
    """Checked in a fresh interpreter: SciPy's FFT package put 26 MB on a Stage C worker at its first card."""
    probe = (
        "import random, sys\n"
        "from stage_e_dagster.corpus.catalogue import build_catalogue\n"
        "from stage_e_dagster.corpus.render import Variant, encode, render_card\n"
        "from stage_e_dagster.stage_c.compute import compute_evidence\n"
        "_, specs = build_catalogue(random.Random(5), 10)\n"
        "v = Variant(height=700)\n"
        "result = compute_evidence('h', encode(render_card(specs[0], v), v), latency_ms=1.0, keys=['art_phash'])\n"
        "assert result.fields['art_phash'] is not None, result\n"
        "print(sorted(m for m in sys.modules if m == 'scipy' or m.startswith('scipy.'))[:5])\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout
