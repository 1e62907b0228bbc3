"""Progress bars: ``track_progress`` yields every item with a bar per loop and drops the bar when
the loop ends (also when it stops early); every bar has the same columns."""

from __future__ import annotations

import io

from rich.console import Console

from tj_monitor import progress_bar, track_progress


def test_track_yields_every_item_and_drops_its_bar() -> None:
    with track_progress() as track:
        assert list(track(range(5), "five", 5)) == [0, 1, 2, 3, 4]
        assert list(track(iter("ab"), "no total", None)) == ["a", "b"]
        for _ in track(range(10), "stopped early", 10):
            break


def test_bars_have_the_info_and_eta_columns() -> None:
    out = io.StringIO()
    bar = progress_bar(console=Console(file=out, width=120, force_terminal=True))
    with bar:
        task = bar.add_task("phase 1", total=4, info="loss 0.5")
        bar.advance(task, 2)
        bar.refresh()
    shown = out.getvalue()
    assert "phase 1" in shown and "2/4" in shown and "loss 0.5" in shown and "eta" in shown


def test_a_disabled_bar_shows_nothing() -> None:
    out = io.StringIO()
    with progress_bar(console=Console(file=out, force_terminal=True), disable=True) as bar:
        bar.advance(bar.add_task("recording", total=2, info=""))
    assert out.getvalue() == ""
