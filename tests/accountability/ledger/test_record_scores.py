"""The verifier's board counts the rows the leaderboard counts by default; hindsight rows apart."""

from __future__ import annotations

from ldtm_core.accountability.ledger import record_scores as scores


def _row(i, mode="live", status="active", in_sample=False, correct=True, day="2024-05-01", ticker="AAPL"):
    return {
        "id": i, "ticker": ticker, "run_date": day, "mode": mode, "model_status": status,
        "in_sample": in_sample, "next_day_direction_correct": correct, "next_day_pred": 101.0,
        "run_date_close": 100.0,
    }  # fmt: skip


def test_replay_in_sample_ungated_and_shadow_rows_stay_out_of_the_board():
    rows = [
        _row(1, day="2024-05-01"),
        _row(2, day="2024-05-01", correct=False),  # a second row of the same evening: not scored
        _row(3, day="2024-05-02", status="shadow", correct=False),  # a shadow: never
        _row(4, day="2024-05-02", correct=False),  # the evening's first published row
        _row(5, day="2024-05-03", mode="replay"),  # hindsight, e.g. inserted by the app role
        _row(6, day="2024-05-06", in_sample=True),
        _row(7, day="2024-05-07", status="candidate"),
    ]
    board = scores.board(rows, {}).set_index("group")
    assert list(board.index) == ["board", "replay", "in-sample", "ungated"]
    assert (board.loc["board", "rows"], board.loc["board", "decided"], board.loc["board", "right"]) == (
        2,
        2,
        1,
    )
    assert all(board.loc[g, "rows"] == 1 for g in ("replay", "in-sample", "ungated"))
    assert [str(board.loc["board", k]) for k in ("first", "last")] == ["2024-05-01", "2024-05-02"]


def test_the_original_answers_score_beside_the_revised_ones():
    rows = [_row(1), _row(2, day="2024-05-02")]  # both right on the revised answers (pred 101 > 100)
    # Row 2's next-day answer was first published as 99: the call was then wrong.
    board = scores.board(rows, {(2, "next_day"): 99.0}).set_index("group")
    assert (board.loc["board", "right"], board.loc["board", "right_original"]) == (2, 1)
    assert scores.revision_counts(rows, {(2, "next_day"): 99.0}) == (1, 1)
