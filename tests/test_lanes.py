"""One running job per lane, across every worker: proven by racing 24 workers on 3 lanes."""

from __future__ import annotations

from tests.lane_race import count_overlaps, lane_race


def test_the_overlap_check_counts_overlapping_intervals():
    assert count_overlaps({"a": [(0, 1), (1, 2), (2, 3)], "b": [(0, 5)]}) == 0
    assert count_overlaps({"a": [(0, 2), (1, 3), (2.5, 4)]}) == 2


def test_24_workers_on_3_lanes_never_run_two_jobs_of_one_lane_at_once(database_url, fresh_schema):
    result = lane_race(database_url, fresh_schema, workers=24, lanes=3, jobs=600)
    assert result.jobs == 600
    assert result.overlaps == 0


def test_without_the_lane_index_the_same_race_overlaps(database_url, fresh_schema):
    result = lane_race(database_url, fresh_schema, workers=24, lanes=3, jobs=600, keep_lane_index=False)
    assert result.jobs == 600
    assert result.overlaps > 0  # the check can fail: the index is what prevents this
