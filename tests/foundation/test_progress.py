"""The progress bar of the long commands: a count or a bar, the rate per second and the time left,
rendered by Rich on a clock the test moves."""

from __future__ import annotations

from io import StringIO

from rich.console import Console
from rich.progress import Progress

from stage_e_dagster.cli.output import EtaColumn, RateColumn, eta_seconds, progress_bar, progress_columns


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def rendered(progress: Progress) -> str:
    """The bar's one line, as a terminal of 200 columns would show it."""
    out = Console(file=StringIO(), width=200, force_terminal=False, color_system=None)
    out.print(progress.make_tasks_table(progress.tasks))
    return out.file.getvalue()  # type: ignore[attr-defined]


def a_progress(label: str, total: int | None, unit: str, clock: Clock) -> tuple[Progress, int]:
    progress = Progress(*progress_columns(label, total, unit), get_time=clock, disable=True)
    return progress, progress.add_task(label, total=total)


def test_a_stream_shows_records_per_second_and_the_time_left_from_the_share_read() -> None:
    clock = Clock()
    progress, task = a_progress("importing cards.json: records read", None, "records", clock)
    assert "- records/s" in rendered(progress) and "eta -" in rendered(progress)
    clock.now += 10
    progress.update(task, completed=500, fraction=0.25)  # what Ticker.done_so_far(500, 0.25) sends
    line = rendered(progress)
    assert "500" in line and "50.0 records/s" in line and "eta 0:00:30" in line, line


def test_a_known_total_shows_the_bar_count_rate_and_time_left() -> None:
    clock = Clock()
    progress, task = a_progress("stage c", 200, "cards", clock)
    clock.now += 5
    progress.advance(task, 50)
    line = rendered(progress)
    assert "50/200" in line and "10.0 cards/s" in line and "eta 0:00:15" in line, line
    clock.now += 15
    progress.advance(task, 150)
    assert "eta 0:00:00" in rendered(progress)


def test_a_count_with_no_total_and_no_share_has_a_rate_but_no_time_left() -> None:
    clock = Clock()
    progress, task = a_progress("walking the backlog: cards batched", None, "cards", clock)
    clock.now += 4
    progress.update(task, completed=1200)
    line = rendered(progress)
    assert "1,200" in line and "300.0 cards/s" in line and "eta -" in line, line


def test_eta_is_the_average_pace_so_far() -> None:
    assert eta_seconds(None, 0.5) is None and eta_seconds(10.0, None) is None and eta_seconds(10.0, 0.0) is None
    assert eta_seconds(10.0, 0.5) == 10.0 and eta_seconds(30.0, 0.75) == 10.0
    assert eta_seconds(10.0, 1.0) == 0.0 and eta_seconds(10.0, 1.2) == 0.0


def test_every_bar_has_the_rate_and_the_time_left() -> None:
    for total in (None, 10):
        kinds = {type(c) for c in progress_columns("x", total, "cards")}
        assert {RateColumn, EtaColumn} <= kinds


def test_the_bar_is_off_when_stderr_is_not_a_terminal() -> None:
    with progress_bar("x", None, unit="records") as bar:  # pytest's stderr is captured, not a terminal
        bar.done_so_far(3, 0.5)
        assert bar._progress.disable
        assert bar._progress.tasks[0].completed == 3 and bar._progress.tasks[0].fields["fraction"] == 0.5
