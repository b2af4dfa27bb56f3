"""bench/adaptive_rate.py: its API keeps a limit in fixed windows that a cut changes at once and tells it in every
answer's headers; its figures are what the API's log says; and a quick run prints them for every variant."""

from __future__ import annotations

import doctest
import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench_module(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


api_module = bench_module("adaptive_api")
Schedule, WindowedAPI, Figures = api_module.Schedule, api_module.WindowedAPI, api_module.Figures

SCHEDULE = Schedule(window=10, limit=3, cut_limit=1, cut_from=15, cut_to=25)
ORIGIN = 1000.0


def answers(api, *seconds: float, account: str = "acme-us") -> list[tuple[int, dict[str, str]]]:
    return [api.respond(account, ORIGIN + t) for t in seconds]


def started_api():
    api = WindowedAPI(SCHEDULE, ("acme-us", "acme-eu"))
    api.start(ORIGIN)
    return api


def test_the_api_counts_fixed_windows_from_its_origin_and_names_what_remains_in_every_answer():
    api = started_api()

    served = answers(api, 0.0, 4.0) + answers(api, 9.5, account="acme-eu")

    assert [status for status, _ in served] == [200, 200, 200]
    assert [h["X-RateLimit-Remaining"] for _, h in served] == ["2", "1", "0"]  # the lane's owners share the window
    assert [h["X-RateLimit-Reset"] for _, h in served] == ["10", "6", "1"]  # whole seconds to its end, rounded up
    assert {h["X-RateLimit-Limit"] for _, h in served} == {"3"}
    assert all("Retry-After" not in h for _, h in served)


def test_a_request_over_the_limit_is_refused_until_the_window_ends_and_uses_none_of_it():
    api = started_api()
    answers(api, 0.0, 1.0, 2.0)

    (refused,) = answers(api, 2.5)
    again, next_window = answers(api, 3.0, 10.0)

    assert refused == (
        429,
        {"X-RateLimit-Limit": "3", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "8", "Retry-After": "8"},
    )
    assert again[0] == 429
    assert next_window[0] == 200 and next_window[1]["X-RateLimit-Remaining"] == "2"  # the 429s took nothing
    assert [status for _, status in api.log] == [200, 200, 200, 429, 429, 200]


def test_a_cut_applies_at_once_to_the_window_under_way_and_so_does_its_end():
    api = started_api()
    answers(api, 10.0)  # the second window: one of three served before the cut

    during, in_next_window, over = answers(api, 15.0, 21.0, 22.0)
    (after,) = answers(api, 25.0)

    assert during[0] == 429 and during[1]["X-RateLimit-Limit"] == "1" and during[1]["X-RateLimit-Remaining"] == "0"
    assert in_next_window[0] == 200 and in_next_window[1]["X-RateLimit-Remaining"] == "0"
    assert over[0] == 429 and over[1]["Retry-After"] == "8"
    assert after[0] == 200 and after[1]["X-RateLimit-Limit"] == "3" and after[1]["X-RateLimit-Remaining"] == "1"


def test_other_accounts_are_answered_and_not_counted():
    api = started_api()

    assert api.respond("warm-up", ORIGIN) == (200, {})
    assert api.log == [] and answers(api, 0.0)[0][1]["X-RateLimit-Remaining"] == "2"


def test_the_figures_count_the_run_only_and_set_what_was_served_against_what_the_limit_in_force_allowed():
    log = [(t, 200) for t in (1.0, 2.0, 11.0, 16.0, 26.0, 27.0)] + [(16.5, 429), (30.5, 200), (31.0, 429)]

    figures = Figures.of(log, SCHEDULE, seconds=30.0)

    # allowed: 3 a window over 30 s, less 2 a window over the 10 s of the cut: 9 - 2 = 7
    assert (figures.served, figures.refused) == (6, 1)
    assert figures.quota_used == pytest.approx(6 / 7)
    assert figures.refused_share == pytest.approx(1 / 7)
    assert figures.recovery_s == 1.0  # the first served after the cut: 90 % of 3 per 10 s over 10/12 s is one


def test_recovery_is_when_the_served_rate_after_the_cut_is_back_near_the_limit_as_its_examples_show():
    failed, tried = doctest.testmod(api_module, optionflags=doctest.ELLIPSIS)
    assert failed == 0 and tried >= 8
    served = [t / 10 for t in range(1, 1651)]  # 10 a second for 165 s
    assert api_module.recovery(served, Schedule()) == 0.0
    assert api_module.recovery([t for t in served if not 105 <= t < 110], Schedule()) == pytest.approx(9.4)
    assert api_module.recovery([t for t in served if t % 1 < 0.75], Schedule()) == math.inf  # 8 a second


LINE = re.compile(
    r"^variant=(?P<variant>\w+) quota_used=(?P<quota_used>[0-9.]+) refused_share=(?P<refused_share>[0-9.]+) "
    r"recovery_s=(?P<recovery_s>[0-9.]+|inf) served=(?P<served>\d+) refused=(?P<refused>\d+)$"
)


@pytest.mark.slow
def test_a_quick_run_prints_sane_figures_for_each_variant_and_which_targets_held(database_url):
    done = subprocess.run(
        [sys.executable, str(BENCH / "adaptive_rate.py"), "--quick"],
        env={**os.environ, "SYNCLANE_BENCH_DATABASE_URL": database_url},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    runs = {m["variant"]: m for m in map(LINE.match, lines) if m}
    assert list(runs) == ["adaptive", "static_right", "static_high", "retry_only"], done.stdout
    for variant, run in runs.items():
        served, refused = int(run["served"]), int(run["refused"])
        assert served > 0, variant
        assert 0 < float(run["quota_used"]) < 2, variant  # never more than the run's windows could serve
        assert float(run["refused_share"]) == pytest.approx(refused / (served + refused), abs=1e-4), variant
        assert float(run["recovery_s"]) >= 0, variant
    verdict = lines[-1].split()
    assert re.fullmatch(r"targets_held=\d/6", verdict[0]), lines[-1]
    assert [item.split("=")[0] for item in verdict[1:]] == [
        "quota_used_at_least_0.9",
        "refused_share_at_most_0.005",
        "recovery_s_at_most_10",
        "better_than_static_right",
        "better_than_static_high",
        "better_than_retry_only",
    ]
    assert all(item.split("=")[1] in ("held", "missed") for item in verdict[1:])
