"""Stage C CPU per card with the PP-OCR reader, against today's reader (Tesseract), in the same run.

Two corpora: the photo-like synthetic corpus (``stage-e seed --photo-like``, every condition alike)
and the real photos (``../shared/fixtures/real-photos`` and ``real-photos-2``, single-card photos
only; evaluation input, read where it lies and never copied). Each arm runs in a worker-like process
of its own, one core: Dagster and the code location imported as a run worker has them, then Stage C's
``compute_evidence`` on every image at the shipped settings, its CPU time per card measured in that
process. Today's reader is the Stage C of ``--baseline-rev`` (the last commit with Tesseract), taken
from git into a scratch folder; it needs ``tesserocr`` and Debian's ``tesseract-ocr`` (not project
dependencies any more: ``pip install tesserocr``), and without them the bench says so and prints the
new reader's figures alone. Printed: median and p90 CPU per card and their ratios (new / today),
collector numbers read right, and each worker's peak resident memory.

    .venv/bin/python bench/stage_c.py [--cards 40] [--seed 0] [--baseline-rev 9bf09d4] [--no-real]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures"
REAL_FOLDERS = (FIXTURES / "real-photos", FIXTURES / "real-photos-2")
BASELINE_REV = "9bf09d4"  # main before issue 30: Stage C reads with Tesseract
TARGET_MEDIAN_S = 1.0     # per real photo, one core
TARGET_RSS_MB = 450

# The worker: a run worker's imports, then Stage C per image, CPU per card in this process.
WORKER = r"""
import inspect, json, resource, sys, time
import sqlalchemy as sa
import stage_e_dagster
assert stage_e_dagster.__file__.startswith(job_root := sys.argv[1]), (stage_e_dagster.__file__, job_root)
from stage_e_dagster.definitions import defs  # what a run worker loads before its first step
from stage_e_dagster.stage_c.compute import compute_evidence
from stage_e_dagster.stage_c.lexicon import known_set_codes
job = json.loads(sys.stdin.read())
engine = sa.create_engine(job["catalogue"])
extra = {"lexicon": known_set_codes(engine)}
if "printed" in inspect.signature(compute_evidence).parameters:
    from stage_e_dagster.catalog.printed_keys import printed_keys
    extra["printed"] = printed_keys(engine)
for item in job["images"]:
    data = open(item["path"], "rb").read()
    started = time.process_time()
    result = compute_evidence("bench", data, latency_ms=None, **extra)
    cpu = time.process_time() - started
    print(json.dumps({"path": item["path"], "cpu": cpu, "number": result.fields.get("collector_number"),
                      "set": result.fields.get("collector_set_code")}), flush=True)
print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
"""


@dataclass
class Image:
    path: str
    number: str | None  # the printed number, when the card prints a legible one


@dataclass
class ArmResult:
    cpu: dict[str, float]
    numbers: dict[str, str | None]
    peak_rss_mb: float


def _key(number: str | None) -> str | None:
    return (number.strip().lower().lstrip("0") or "0") if number else None


def run_arm(pythonpath: Path, images: list[Image], catalogue: str) -> ArmResult:
    """One worker process over ``images`` with ``stage_e_dagster`` imported from ``pythonpath``."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath), "STAGE_E_STREAMING_ENABLED": "false"}
    job = json.dumps({"catalogue": catalogue, "images": [{"path": im.path} for im in images]})
    done = subprocess.run([sys.executable, "-c", WORKER, str(pythonpath)], input=job, capture_output=True, text=True,
                          env=env, cwd=str(pythonpath), timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "worker failed")
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rows = [ln for ln in lines if "path" in ln]
    return ArmResult({r["path"]: r["cpu"] for r in rows}, {r["path"]: r["number"] for r in rows},
                     next(ln["peak_rss_mb"] for ln in lines if "peak_rss_mb" in ln))


def baseline_tree(rev: str, into: Path) -> Path:
    """``stage_e_dagster`` as it was at ``rev``, extracted from git into ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "stage_e_dagster"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def photo_like_corpus(work: Path, cards: int, seed: int) -> tuple[list[Image], str]:
    from stage_e_dagster.catalog.engine import make_engine
    from stage_e_dagster.catalog.migrate import upgrade
    from stage_e_dagster.corpus.seed import seed_corpus
    from stage_e_dagster.evaluation.labels import load_labels

    url = f"sqlite:///{work / 'photo-like.sqlite'}"
    engine = make_engine(url)
    upgrade(engine)
    summary = seed_corpus(engine, work / "corpus", cards=cards, seed=seed, photo_like=True)
    engine.dispose()
    labels = {row["identifier"]: row for row in load_labels(summary.labels_path)}
    images = []
    for path in sorted((work / "corpus" / "images").iterdir()):
        label = labels.get(path.stem) or labels.get(path.name)
        if path.suffix.lower() in (".png", ".jpg", ".jpeg") and label is not None:
            printed = label.get("collector_line_printed", True) and not label.get("broken")
            images.append(Image(str(path), str(label["collector_number"]) if printed else None))
    return images, url


def real_photo_corpus(work: Path) -> tuple[list[Image], str] | None:
    from stage_e_dagster.catalog.engine import make_engine
    from stage_e_dagster.catalog.migrate import upgrade
    from stage_e_dagster.evaluation.photos import build_photo_catalogue, load_photo_labels

    folders = [f for f in REAL_FOLDERS if (f / "labels.csv").is_file()]
    if not folders:
        return None
    url = f"sqlite:///{work / 'real.sqlite'}"
    engine = make_engine(url)
    upgrade(engine)
    labels = [lb for folder in folders for lb in load_photo_labels(folder / "labels.csv")]
    build_photo_catalogue(engine, labels)
    engine.dispose()
    images, seen = [], set()
    for folder in folders:
        for lb in load_photo_labels(folder / "labels.csv"):
            if lb.multi or lb.render or lb.file in seen:
                continue
            seen.add(lb.file)
            images.append(Image(str(folder / lb.file), lb.number if lb.prints_number else None))
    return images, url


def report(corpus: str, images: list[Image], new: ArmResult, today: ArmResult | None) -> dict[str, float]:
    def figures(arm: ArmResult) -> tuple[float, float, int]:
        cpus = sorted(arm.cpu.values())
        p90 = cpus[min(len(cpus) - 1, round(0.9 * (len(cpus) - 1)))]
        read = sum(1 for im in images if im.number and _key(arm.numbers.get(im.path)) == _key(im.number))
        return statistics.median(cpus), p90, read

    printed = sum(1 for im in images if im.number)
    median, p90, read = figures(new)
    print(f"[{corpus}, {len(images)} images] PP-OCR: CPU per card median {median:.2f} s, p90 {p90:.2f} s; "
          f"collector numbers read right {read}/{printed}; worker peak RSS {new.peak_rss_mb:.0f} MB")
    out = {"median_s": median, "p90_s": p90, "read": read, "printed": printed, "peak_rss_mb": new.peak_rss_mb}
    if today is not None:
        t_median, t_p90, t_read = figures(today)
        print(f"[{corpus}, {len(images)} images] today's reader (Tesseract): CPU per card median {t_median:.2f} s, "
              f"p90 {t_p90:.2f} s; collector numbers read right {t_read}/{printed}; worker peak RSS "
              f"{today.peak_rss_mb:.0f} MB")
        print(f"[{corpus}] ratio PP-OCR / today: CPU per card median {median / t_median:.2f}, p90 {p90 / t_p90:.2f}; "
              f"numbers read {read} vs {t_read}")
        only_today = [Path(im.path).name for im in images if im.number
                      and _key(today.numbers.get(im.path)) == _key(im.number) != _key(new.numbers.get(im.path))]
        print(f"[{corpus}] numbers today's reader read and PP-OCR did not: {', '.join(only_today) or 'none'}")
        out.update(today_median_s=t_median, today_p90_s=t_p90, today_read=t_read, only_today=len(only_today))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=40, help="photo-like cards (default 40)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help=f"today's reader (default {BASELINE_REV})")
    parser.add_argument("--no-baseline", action="store_true", help="the new reader alone")
    parser.add_argument("--no-real", action="store_true", help="skip the real photos")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON at the end")
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-stage-c-") as tmp:
        work = Path(tmp)
        corpora = [("photo-like", *photo_like_corpus(work, args.cards, args.seed))]
        real = None if args.no_real else real_photo_corpus(work)
        if real is not None:
            corpora.append(("real photos", *real))
        elif not args.no_real:
            print(f"real photos: none found under {FIXTURES} (evaluation input kept outside the project)")
        baseline: Path | None = None
        if not args.no_baseline:
            try:
                (work / "baseline").mkdir()
                baseline = baseline_tree(args.baseline_rev, (work / "baseline").resolve())
            except (subprocess.CalledProcessError, FileNotFoundError) as exc:
                print(f"baseline unavailable: git archive {args.baseline_rev} failed ({exc})")
        for corpus, images, url in corpora:
            new = run_arm(ROOT, images, url)
            today = None
            if baseline is not None:
                try:
                    today = run_arm(baseline, images, url)
                except RuntimeError as exc:
                    print(f"baseline unavailable ({exc}): pip install tesserocr, apt-get install tesseract-ocr")
                    baseline = None
            results[corpus] = report(corpus, images, new, today)
    real_fig = results.get("real photos")
    if real_fig is not None:
        print(f"target: median <= {TARGET_MEDIAN_S:.1f} s per real photo: "
              f"{'met' if real_fig['median_s'] <= TARGET_MEDIAN_S else 'NOT met'} ({real_fig['median_s']:.2f} s); "
              f"worker peak RSS < {TARGET_RSS_MB} MB: "
              f"{'met' if real_fig['peak_rss_mb'] < TARGET_RSS_MB else 'NOT met'} ({real_fig['peak_rss_mb']:.0f} MB)")
    if args.json:
        print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    csv.field_size_limit(1 << 20)
    main()
