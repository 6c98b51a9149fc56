"""The fold store keeps one result per key with its own weights (issue 28 item 6), and the key names
what changes a fit's numbers on this host (issue 28 item 7)."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import io
import tokenize

import numpy as np
import pytest
import torch
from accountability_helpers import ingest, make_model, make_settings

from ldtm_core.accountability.gate import ledger as gate_ledger
from ldtm_core.accountability.gate.gate import GateThresholds, run_gate
from ldtm_core.horizons import HORIZONS
from ldtm_core.learning import backtest as bt
from ldtm_core.learning import fold_cache, precision
from ldtm_core.learning.model import LDTM, get_profile

CFG = get_profile("demo", max_epochs=2, patience=1)
DATES = np.array(["2024-01-02", "2024-01-03"], dtype="datetime64[D]")


def _model(seed: int) -> LDTM:
    torch.manual_seed(seed)
    return LDTM(CFG)


def _store(engine, s, key, model, pred):
    return fold_cache.store(
        engine,
        s,
        key=key,
        ticker="AAPL",
        signature="sig",
        data_fingerprint="fp",
        cutoff=dt.date(2024, 1, 1),
        seed=0,
        parent=None,
        model=model,
        pred=pred,
        test_dates=DATES,
        epochs=2,
        best_epoch=1,
        val_loss=0.5,
    )


def _same(state_a, state_b) -> bool:
    return all(torch.equal(state_a[k], state_b[k]) for k in state_a)


@pytest.fixture
def store_world(engine, db_url, tmp_path):
    ingest(engine, ["AAPL"], start="2023-06-01", end="2023-07-31")
    return make_settings(tmp_path, db_url)


def test_an_existing_key_keeps_its_original_weights_and_result(engine, store_world):
    s, key = store_world, "k" * 64
    first, second = _model(1), _model(2)
    _store(engine, s, key, first, np.full((2, len(HORIZONS)), 1.0))
    kept = _store(engine, s, key, second, np.full((2, len(HORIZONS)), 2.0))
    got = fold_cache.load(engine, s, key)
    assert got.weights is not None, "the original weights no longer verify"
    assert _same(fold_cache.load_weights(got.weights), first.state_dict())
    assert (got.pred == 1.0).all() and (fold_cache.stored_predictions(engine, key)[1] == 1.0).all()
    assert (kept == 1.0).all()  # what is stored under the key is what the caller scores


def test_weights_lost_then_refit_replaces_row_and_file_together(engine, store_world):
    s, key = store_world, "p" * 64
    _store(engine, s, key, _model(1), np.full((2, len(HORIZONS)), 1.0))
    for f in fold_cache.weights_dir(s).glob("*.pt"):  # the prune
        f.unlink()
    assert fold_cache.load(engine, s, key).weights is None
    refit = _model(2)
    stored = _store(engine, s, key, refit, np.full((2, len(HORIZONS)), 2.0))
    got = fold_cache.load(engine, s, key)
    assert got.weights is not None, "a refit after a prune left the key without weights for good"
    assert _same(fold_cache.load_weights(got.weights), refit.state_dict())
    assert (got.pred == 2.0).all() and (fold_cache.stored_predictions(engine, key)[1] == 2.0).all()
    assert (stored == 2.0).all()


def test_prune_refit_load_through_the_backtest(engine, db_url, tmp_path):
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2022-06-01", end="2024-06-28")
    make_model(engine, s, "AAPL", cfg=CFG)
    first = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=10)
    for f in fold_cache.weights_dir(s).glob("*.pt"):
        f.unlink()
    again = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=10)
    assert again.reused_folds == 0  # no weights: refitted
    for fold in again.folds:
        got = fold_cache.load(engine, s, fold.fit.fold_key)
        assert got.weights is not None
    third = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, test_sessions=10)
    assert third.reused_folds == 2
    assert [f.scores.hits for f in third.folds] == [f.scores.hits for f in first.folds]


def _key(runtime):
    return fold_cache.fold_key("sig", "fp", dt.date(2024, 1, 1), 0, None, runtime)


def test_the_key_changes_with_precision_device_torch_and_learning_code():
    base = fold_cache.runtime(CFG, "cpu")
    assert fold_cache.runtime(CFG, "cpu") == base  # the same host twice: the same key
    assert _key(fold_cache.runtime(CFG, "cpu")) == _key(base)
    # The other precision than this host's (a CPU with native bf16 resolves `auto` to bf16).
    for field, other in (
        ("precision", "fp32" if base.precision == "bf16" else "bf16"),
        ("device", "cuda NVIDIA H100"),
        ("torch", "9.9.9"),
        ("code", "0" * 64),
    ):
        changed = base._replace(**{field: other})
        assert _key(changed) != _key(base), field


def test_the_runtime_resolves_auto_precision_as_training_does(monkeypatch):
    monkeypatch.setattr(precision, "cpu_can_run_bf16", lambda: True)  # a forced bf16 resolves where it runs
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cpu").precision == "bf16"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cpu").precision == "fp32"
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="bf16"), "cpu").precision == "bf16"
    assert fold_cache.runtime(CFG, "cpu").torch == torch.__version__


def test_the_code_hash_follows_the_learning_files(tmp_path, monkeypatch):
    a = tmp_path / "a.py"
    a.write_text("x = 1\n")
    monkeypatch.setattr(fold_cache, "LEARNING_CODE", (a,))
    before = fold_cache.code_hash.__wrapped__()
    a.write_text("x = 2\n")
    assert fold_cache.code_hash.__wrapped__() != before


def test_the_runtime_on_cuda_names_the_card_and_its_resolved_precision(monkeypatch):
    """No GPU here: the CUDA branch with the card's answers planted."""
    from ldtm_core.learning import training_loop

    monkeypatch.setattr(training_loop, "resolve_device", lambda device: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    from ldtm_core.learning import precision

    monkeypatch.setattr(precision, "cuda_amp_speedup", lambda device, dtype: 0.7)  # AMP slower here
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cuda").precision == "fp32"
    monkeypatch.setattr(precision, "cuda_amp_speedup", lambda device, dtype: 1.5)  # AMP faster here
    rt = fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cuda")
    assert (rt.precision, rt.device) == ("bf16", "cuda NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert fold_cache.runtime(dataclasses.replace(CFG, amp="auto"), "cuda").precision == "fp16"
    assert _key(rt) != _key(fold_cache.runtime(CFG, "cpu"))


# --- the code in the key: what the fitted function is, not how its source is written -------------


def _docstrings(tree: ast.AST) -> list[ast.Constant]:
    return [
        n.body[0].value
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
        and isinstance(n.body[0].value.value, str)
    ]


def _cosmetic(text: str) -> str:
    """The same program written differently: every docstring reworded, a comment before every top-level
    statement, every token respaced (tokenize's compat mode)."""
    lines = text.splitlines(keepends=True)
    for doc in sorted(_docstrings(ast.parse(text)), key=lambda d: d.lineno, reverse=True):
        head = lines[doc.lineno - 1][: doc.col_offset]
        lines[doc.lineno - 1 : doc.end_lineno] = [f'{head}"""Reworded, {doc.lineno}."""  # and noted\n']
    text = "".join(lines)
    lines = text.splitlines(keepends=True)
    for stmt in reversed(ast.parse(text).body):
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        lines.insert(first - 1, "# why this statement is here, said at length\n\n")
    tokens = tokenize.generate_tokens(io.StringIO("".join(lines)).readline)
    return tokenize.untokenize((t.type, t.string) for t in tokens)


REAL_LEARNING_CODE = fold_cache.LEARNING_CODE  # before any test swaps it


def _real_change(text: str) -> str:
    return text + "\nDEFAULT_SCALE = 2.0\n"


def _copies(folder, edit=lambda text: text) -> tuple:
    """The learning files copied under their own names (the hash includes them), each `edit`ed."""
    folder.mkdir()
    out = []
    for path in REAL_LEARNING_CODE:
        copy = folder / path.name
        copy.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
        out.append(copy)
    return tuple(out)


def _code_hash(monkeypatch, files) -> str:
    monkeypatch.setattr(fold_cache, "LEARNING_CODE", files)
    return fold_cache.code_hash.__wrapped__()


def test_a_comment_docstring_or_formatting_edit_of_the_learning_code_keeps_the_key(tmp_path, monkeypatch):
    plain, edited = _copies(tmp_path / "plain"), _copies(tmp_path / "edited", _cosmetic)
    for a, b in zip(plain, edited, strict=True):
        assert a.read_text() != b.read_text()
        compile(b.read_text(), str(b), "exec")  # still a program
    before = _code_hash(monkeypatch, plain)
    assert _code_hash(monkeypatch, edited) == before
    assert _key(fold_cache.runtime(CFG, "cpu")._replace(code=before)) == _key(
        fold_cache.runtime(CFG, "cpu")._replace(code=_code_hash(monkeypatch, edited))
    )
    assert _code_hash(monkeypatch, _copies(tmp_path / "real", _real_change)) != before


def _hash_of(tmp_path, monkeypatch, text: str, name="model.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return _code_hash(monkeypatch, (path,))


@pytest.mark.parametrize(
    "before, after",
    [
        ("x = 1\n", "x = 1  # one, the default\n"),
        ("x = (1 +\n     2)\n", "x = (1 + 2)\n"),
        ("x = 'a'\n", 'x = "a"\n'),
        (
            'def f():\n    """Sum."""\n    return 1\n',
            'def f():\n    """Sum, longer:\n\n    and more."""\n\n    return 1\n',
        ),
        ("def f():\n    return 1\n", 'def f():\n    """Added."""\n    return 1\n'),
        ("class C:\n    n = 1\n", 'class C:\n    """Added."""\n\n    n = 1\n'),
        ("x = 1\n", '"""A module docstring."""\n\nx = 1\n'),
    ],
)
def test_cosmetic_edits_keep_the_code_hash(tmp_path, monkeypatch, before, after):
    assert _hash_of(tmp_path, monkeypatch, before) == _hash_of(tmp_path, monkeypatch, after)


@pytest.mark.parametrize(
    "before, after",
    [
        ("LR = 1e-3\n", "LR = 2e-3\n"),  # a constant
        ("def f(a, b):\n    return a + b\n", "def f(a, b):\n    return a - b\n"),  # an operator
        ("def f(a, b):\n    return a - b\n", "def f(a, b):\n    return b - a\n"),  # the operands' order
        ("x = f(1)\ny = g(2)\n", "y = g(2)\nx = f(1)\n"),  # the statements' order
        ("x = 'mean'\n", "x = 'sum'\n"),  # a string that is not a docstring
        ('def f():\n    """Doc."""\n', 'def f():\n    """Doc."""\n    return 1\n'),
        ("x = 1\n", "x = 1\ny = 2\n"),
    ],
)
def test_a_real_code_change_changes_the_code_hash_and_the_key(tmp_path, monkeypatch, before, after):
    a, b = _hash_of(tmp_path, monkeypatch, before), _hash_of(tmp_path, monkeypatch, after)
    assert a != b
    rt = fold_cache.runtime(CFG, "cpu")
    assert _key(rt._replace(code=a)) != _key(rt._replace(code=b))
    assert _hash_of(tmp_path, monkeypatch, before, "split.py") != a  # which file it is counts too


@pytest.fixture
def fresh_code_hash():
    fold_cache.code_hash.cache_clear()
    yield
    fold_cache.code_hash.cache_clear()


def test_a_cosmetic_edit_neither_refits_nor_rejudges_and_a_real_one_refits_as_the_same_trial(
    engine, db_url, tmp_path, monkeypatch, fresh_code_hash
):
    """The gate's ledger counts a recipe's tries on the same rows once, whatever re-rolled its fold keys.

    Before, any edit of the learning files (a comment included) re-rolled every fold key, and with them
    the evidence key: the recipe already judged on these rows was judged again as a new try."""
    s = make_settings(tmp_path, db_url)
    ingest(engine, ["AAPL"], start="2022-06-01", end="2024-06-28")
    # An unreachable accuracy: every judgement is a counted try that fails, none promotes.
    failing = GateThresholds(min_rows=1, min_fold_rows=1, min_direction_accuracy=1.01)

    def judged(folder, edit, seed):
        monkeypatch.setattr(fold_cache, "LEARNING_CODE", _copies(tmp_path / folder, edit))
        fold_cache.code_hash.cache_clear()
        cand = make_model(engine, s, "AAPL", seed=seed, cfg=CFG)  # a retrain of the same recipe
        res = bt.run_backtest(engine, s, "AAPL", CFG, folds=2, model_id=cand, test_sessions=10)
        return [f.fit.fold_key for f in res.folds], res, run_gate(engine, s, "AAPL", thresholds=failing)

    keys, _, first = judged("plain", lambda text: text, 1)
    assert first.decision == "fail" and first.trials.count == 1

    cosmetic_keys, res, again = judged("cosmetic", _cosmetic, 2)
    assert cosmetic_keys == keys and res.reused_folds == 2
    assert again.decision == "insufficient evidence" and "new_evidence" in {c.name for c in again.failing}
    assert again.trials.count == 1 and again.trials.previous["decision"] == "fail"

    real_keys, res, third = judged("real", _real_change, 3)
    assert not set(real_keys) & set(keys) and res.refit_folds == 2  # the code may fit otherwise: refit
    # ...but it is the same recipe on the same rows: the same trial, not a new one.
    assert third.decision == "insufficient evidence" and third.trials.count == 1
    assert [r["decision"] for r in gate_ledger.ledger(engine, "AAPL")] == ["fail"]
