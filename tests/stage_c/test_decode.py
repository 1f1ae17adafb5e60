"""Bad images get named outcomes at decode: not an image, truncated, decompression bomb."""

from __future__ import annotations

import io

from PIL import Image

from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.decode import DECODE_SIDE, decode_image
from stage_e_dagster.stage_c.manifest import MANIFEST_VERSIONS


def test_good_jpeg_decodes(card_jpeg: bytes) -> None:
    decoded = decode_image(card_jpeg)
    assert decoded.error is None and decoded.image_format == "JPEG" and decoded.image.mode == "RGB"


def test_not_an_image() -> None:
    assert decode_image(b"<html>503</html>").error == "not-an-image"
    assert decode_image(b"").error == "not-an-image"


def test_truncated_jpeg_is_detected(card_jpeg: bytes) -> None:
    decoded = decode_image(card_jpeg[: len(card_jpeg) // 2])
    assert decoded.error == "truncated-image" and decoded.truncated


def test_decompression_bomb_is_refused_before_decoding() -> None:
    buf = io.BytesIO()
    Image.new("1", (9000, 9000)).save(buf, format="PNG")  # 81 Mpx in a few kilobytes
    assert len(buf.getvalue()) < 100_000
    assert decode_image(buf.getvalue()).error == "decompression-bomb"


def test_pixel_ceiling_is_a_parameter(card_jpeg: bytes) -> None:
    assert decode_image(card_jpeg, max_pixels=10_000).error == "decompression-bomb"


def test_undecodable_bytes_make_a_complete_terminal_record(card_jpeg: bytes) -> None:
    result = compute_evidence("h", card_jpeg[:3000], latency_ms=1.0)
    assert result.terminal and result.error_class == "truncated-image"
    assert result.extractor_versions == dict(MANIFEST_VERSIONS)
    assert set(result.skip_reasons.values()) == {"truncated-image"}
    assert result.fields["is_truncated"] is True and result.fields["fetch_ok"] is False
    assert result.fields["byte_size"] == 3000 and len(result.fields["sha256"]) == 64


def test_a_large_upload_is_read_at_the_decode_side_and_keeps_its_own_size() -> None:
    """A photo longer than DECODE_SIDE is read at that long side (a JPEG scaled by its decoder first, then
    resized), whatever its format; the upload's own size is what is recorded."""
    for fmt, size in (("PNG", (1800, 2600)), ("JPEG", (3300, 4400)), ("JPEG", (2400, 3200))):
        buf = io.BytesIO()
        Image.new("RGB", size, (120, 80, 40)).save(buf, format=fmt)
        decoded = decode_image(buf.getvalue())
        assert decoded.error is None, fmt
        assert max(decoded.image.size) == DECODE_SIDE, (fmt, size, decoded.image.size)
        assert abs(decoded.image.size[0] / decoded.image.size[1] - size[0] / size[1]) < 0.01
        assert (decoded.width, decoded.height) == size


def test_an_upload_within_the_decode_side_is_read_whole(card_jpeg: bytes) -> None:
    decoded = decode_image(card_jpeg)
    assert decoded.image.size == (decoded.width, decoded.height)
    assert max(decoded.image.size) <= DECODE_SIDE
