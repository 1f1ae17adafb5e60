#!/usr/bin/env python3
"""Screenshots of the Dagster UI for the README: the demo in a real (headless) browser.

It starts ``stage-e demo`` on a free port with a state folder of its own, waits until the corpus
has streamed through, opens a manual trip so the check turns red, follows the check's link to the
acknowledge job's launchpad (and checks that the trip id is in its editor), and writes five PNGs.
Then it stops the demo's whole process group and removes the state folder.

    .venv/bin/python scripts/screenshots.py --out docs/images

The browser is Debian's ``chromium`` (``apt-get install chromium``), driven by Playwright for Python
without a browser download of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, sync_playwright

from stage_e_dagster.cli.demo import stop_process_group
from stage_e_dagster.code_server import free_port
from stage_e_dagster.defs.checks import NO_OPEN_TRIP
from stage_e_dagster.process_groups import start_group

BIN = Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 900}
# Small fixed batches, so the ledger plots have several points from a small corpus; and contention bars
# a busy machine (a CI runner beside other jobs) does not cross, so the only trip is the one opened here.
DEMO_SETTINGS = {"STAGE_E_MICRO_BATCH_SIZE": "4", "STAGE_E_HOST_LOAD_CEILING": "64",
                 "STAGE_E_CPU_PRESSURE_CEILING": "100"}
# The pictures, in the order the README shows them: file name, what it shows.
SHOTS = {
    "envelope-plots.png": "the stage_e_envelope asset's plots: each reading against its ceiling",
    "check-red-during-a-trip.png": "no_open_trip failing during a trip, with the trip id, bar and ack link",
    "ack-launchpad.png": "the acknowledge_trip launchpad opened from the check's link, trip id filled in",
    "run-page.png": "a stage_e_dispatch run: its progress lines over the cards of one micro-batch",
    "stage-c-ledger-plots.png": "the stage_c_evidence ledger metadata plotted across micro-batches",
}


class ScreenshotError(Exception):
    """The demo or the UI did not get where a picture needs it; the message says where it stopped."""


def wait_for(what: str, ready: Callable[[], Any], timeout_s: float, every_s: float = 2.0) -> Any:
    """Poll ``ready`` until it returns something truthy; a ScreenshotError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = ready()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ScreenshotError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


@dataclass
class Demo:
    """The running ``stage-e demo``: its environment (for ``stage-e`` calls), its UI and its process."""

    env: dict[str, str]
    base_url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stage_e(self, *args: str) -> Any:
        done = subprocess.run([str(BIN / "stage-e"), *args], env=self.env, capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise ScreenshotError(f"stage-e {' '.join(args)} failed: {done.stderr.strip()}")
        return json.loads(done.stdout) if "--json" in args else done.stdout

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables or {}}).encode()
        request = urllib.request.Request(f"{self.base_url}/graphql", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)["data"]

    def answers(self) -> bool:
        if self.proc.poll() is not None:
            raise ScreenshotError(f"the demo exited with code {self.proc.returncode}; see {self.log}")
        try:
            with urllib.request.urlopen(f"{self.base_url}/server_info", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


def start_demo(state: Path, cards: int) -> Demo:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STAGE_E_", "DAGSTER_"))}
    env["STAGE_E_STATE_DIR"] = str(state)
    env.update(DEMO_SETTINGS)
    port = free_port()
    log = state.parent / "demo.log"
    with open(log, "wb") as out:
        proc = start_group([str(BIN / "stage-e"), "demo", "--cards", str(cards), "--port", str(port)],
                           env=env, stdout=out, stderr=subprocess.STDOUT)
    return Demo(env, f"http://127.0.0.1:{port}", proc, log)


def drained(demo: Demo) -> bool:
    status = demo.stage_e("status", "--json")
    ledger = demo.stage_e("ledger", "--json")
    finished = [b for b in ledger["batches"] if b["status"] == "completed"]
    return status["stage_c_backlog"] == 0 and status["stage_d_backlog"] == 0 and len(finished) >= 2


RUNS = """query { runsOrError(filter: {pipelineName: "stage_e_dispatch", statuses: [SUCCESS]}, limit: 10) {
  ... on Runs { results { runId } } } }"""
OBSERVATIONS = """query { assetOrError(assetKey: {path: ["stage_e_envelope"]}) {
  ... on Asset { assetObservations(limit: 10) { timestamp } } } }"""
CHECK = """query { assetCheckExecutions(assetKey: {path: ["stage_e_envelope"]}, checkName: "%s", limit: 1) {
  evaluation { success metadataEntries { label ... on UrlMetadataEntry { url } } } } }""" % NO_OPEN_TRIP


def settle(page: Page, text: str, timeout_ms: int = 90_000) -> None:
    """Until the page shows ``text``, then a moment for the charts to draw."""
    page.wait_for_load_state("networkidle", timeout=timeout_ms)
    page.get_by_text(text, exact=False).first.wait_for(state="visible", timeout=timeout_ms)
    page.wait_for_timeout(2000)


def dismiss_welcome(page: Page) -> None:
    """The UI's first-visit dialog ("Join the Dagster community") may open at any moment and cover
    the page: whenever it is there, Playwright clicks Skip before its next action."""
    page.add_locator_handler(page.get_by_role("button", name="Skip"), lambda skip: skip.click())


def shoot(page: Page, out: Path, name: str) -> None:
    page.screenshot(path=str(out / name), full_page=False)
    print(f"wrote {out / name}: {SHOTS[name]}", flush=True)


def metadata_plots(page: Page, url: str, first_plot: str) -> None:
    """An asset's overview with its metadata shown as plots (one per key, in key order), scrolled so
    the plot of ``first_plot`` is at the top."""
    page.goto(url)
    settle(page, "Metadata")
    page.get_by_role("button", name="Plots").first.click()
    title = page.get_by_text(first_plot, exact=True).first
    title.wait_for(state="visible", timeout=90_000)
    title.evaluate("e => e.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(2000)


def red_check_link(demo: Demo, trip_id: str) -> str | None:
    """The check's ack link once the sensor has turned it red for ``trip_id``."""
    [execution] = demo.graphql(CHECK)["assetCheckExecutions"] or [None]
    if not execution or execution["evaluation"]["success"]:
        return None
    urls = {e["label"]: e.get("url") for e in execution["evaluation"]["metadataEntries"]}
    link = urls.get("ack_launchpad")
    return link if link and trip_id in urllib.parse.unquote(link) else None


def take_screenshots(demo: Demo, out: Path) -> None:
    wait_for("the demo's UI", demo.answers, 300)
    wait_for("the corpus to stream through (backlogs empty, two batches done)", lambda: drained(demo), 900, 5)
    wait_for("three observations of the envelope",
             lambda: len(demo.graphql(OBSERVATIONS)["assetOrError"]["assetObservations"]) >= 3, 300, 5)
    [run_id, *_] = [r["runId"] for r in demo.graphql(RUNS)["runsOrError"]["results"]]

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport=VIEWPORT)
            page = context.new_page()
            dismiss_welcome(page)
            metadata_plots(page, f"{demo.base_url}/assets/stage_e_envelope", "cpu_pressure")
            shoot(page, out, "envelope-plots.png")

            metadata_plots(page, f"{demo.base_url}/assets/stage_c_evidence", "elapsed_s")
            shoot(page, out, "stage-c-ledger-plots.png")

            page.goto(f"{demo.base_url}/runs/{run_id}")
            settle(page, "RUN_SUCCESS")
            page.get_by_placeholder("Filter").first.fill("cards")  # the run's progress lines
            settle(page, "stage C: ")
            shoot(page, out, "run-page.png")

            demo.stage_e("trips", "open", "--note", "screenshot: a manual trip")
            [trip] = demo.stage_e("trips", "list", "--open", "--json")
            trip_id = trip["trip_id"]
            wait_for("no_open_trip to turn red with the ack link", lambda: red_check_link(demo, trip_id), 120)
            page.goto(f"{demo.base_url}/assets/stage_e_envelope?view=checks")
            settle(page, f"trip {trip_id} open")
            shoot(page, out, "check-red-during-a-trip.png")

            # The link as the UI renders it in the check's metadata; it opens a new tab.
            with page.context.expect_page() as opened:
                page.locator("a[href*='/jobs/acknowledge_trip/playground/setup']").first.click()
            launchpad = opened.value
            dismiss_welcome(launchpad)
            launchpad.wait_for_url("**/jobs/acknowledge_trip/playground", timeout=90_000)
            settle(launchpad, trip_id)
            editor = launchpad.locator(".CodeMirror").first.inner_text()
            if trip_id not in editor:
                raise ScreenshotError(f"the launchpad's editor does not hold {trip_id}: {editor!r}")
            print(f"the launchpad's editor holds trip {trip_id} (opened from the check's link)", flush=True)
            shoot(launchpad, out, "ack-launchpad.png")
        finally:
            browser.close()
    demo.stage_e("trips", "ack", trip_id, "--note", "screenshots taken")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "images")
    parser.add_argument("--cards", type=int, default=16, help="cards in the demo's synthetic corpus")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        print(f"screenshots: {CHROMIUM} is missing: apt-get install chromium", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="stage-e-screenshots-"))
    demo = start_demo(work / "state", args.cards)
    print(f"demo on {demo.base_url}, state folder {work / 'state'}", flush=True)
    try:
        take_screenshots(demo, args.out)
    except (ScreenshotError, PlaywrightError) as exc:
        print(f"screenshots: {exc} (demo log: {demo.log})", file=sys.stderr)
        return 1
    finally:
        stop_process_group(demo.proc)  # what Ctrl-C does: the demo stops dg dev and everything it started
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
