"""The soak's memory verdict (load/soak.py): RSS at the end against the baseline one minute in
(or a third of the run), per process; and the chart page escapes process names."""
from __future__ import annotations

import os

from load.soak import Sampler, Watched, chart_page, sample


def _rows(name: str, rss: list[float], step: float = 30.0) -> list[dict]:
    return [{"t_s": i * step, "process": name, "pid": 1, "rss_mib": r, "open_fds": 10,
             "cpu_s": 1.0, "disk_mib": 0.0} for i, r in enumerate(rss)]


def test_rss_growth_is_judged_from_the_baseline_not_the_first_sample(tmp_path):
    sampler = Sampler(lambda: [], every_s=30)
    # warm-up from 50 to 100 MiB in the first minute is not growth; 100 -> 109 is flat
    sampler.rows = _rows("broker1", [50, 80, 100, 104, 109]) + \
        _rows("master0", [40, 60, 100, 115, 125])
    report = sampler.report(tmp_path)
    broker, master = report["processes"]["broker1"], report["processes"]["master0"]
    assert broker["baseline_t_s"] == 60 and broker["rss_baseline_mib"] == 100
    assert broker["rss_flat"] and broker["rss_growth"] == 0.09
    assert not master["rss_flat"] and master["rss_growth"] == 0.25
    assert not report["flat_memory"]
    assert (tmp_path / "soak.csv").read_text().count("\n") == 11  # header + 10 samples


def test_a_short_run_takes_its_baseline_a_third_of_the_way_in(tmp_path):
    sampler = Sampler(lambda: [], every_s=1)
    sampler.rows = _rows("locust", [10, 20, 30, 31, 31, 31, 32], step=1.0)
    figures = sampler.report(tmp_path)["processes"]["locust"]
    assert figures["baseline_t_s"] == 2 and figures["rss_flat"]


def test_samples_this_process_and_none_for_a_gone_one(tmp_path):
    mine = sample(Watched("me", os.getpid(), tmp_path))
    assert mine is not None and mine["rss_mib"] > 0 and mine["open_fds"] > 0
    assert sample(Watched("gone", 2**22 + 12345)) is None


def test_chart_page_escapes_names():
    page = chart_page(_rows("<b>x</b>", [1, 2]))
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_the_load_generator_is_charted_but_not_judged(tmp_path):
    me = os.getpid()
    sampler = Sampler(lambda: [Watched("broker1", me), Watched("locust", me, judged=False)],
                      every_s=1)
    sampler.sample_once()  # learns which names are not judged
    sampler.rows = _rows("broker1", [100, 100, 101]) + _rows("locust", [10, 50, 90])
    report = sampler.report(tmp_path)
    locust = report["processes"]["locust"]
    assert not locust["judged"] and not locust["rss_flat"]  # its ledger grows by design
    assert report["processes"]["broker1"]["judged"] and report["flat_memory"]
