"""Checkpoints are data: atomic writes, sha256, and clear refusals of anything else."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import zipfile

import pytest
import torch

from ldtm_core.errors import CheckpointError
from ldtm_core.learning.checkpoints import (
    TEMP_PREFIX,
    Weights,
    clean_temp_files,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    sha256_file,
    write_atomic,
)
from ldtm_core.learning.inference import batched_forward
from ldtm_core.learning.model import LDTM, get_profile

DAY = dt.date(2024, 5, 17)


@pytest.fixture
def saved(tmp_path):
    cfg = get_profile("demo", seed=1)
    torch.manual_seed(1)
    model = LDTM(cfg)
    path = tmp_path / "AAPL.pt"
    sha = save_checkpoint(path, model, cfg, "AAPL", DAY, 0.0123, {"best_epoch": 4})
    return path, sha, model, cfg


def test_roundtrip_keeps_weights_config_and_metadata(saved):
    path, sha, model, cfg = saved
    ck = load_checkpoint(path, expected_sha256=sha, ticker="AAPL")
    assert sha == sha256_file(path) == ck.sha256
    assert ck.config == cfg and ck.signature == cfg.signature
    assert ck.trained_on_date == DAY and ck.val_loss == pytest.approx(0.0123)
    assert ck.metrics == {"best_epoch": 4.0}
    want = model.state_dict()
    assert all(torch.equal(v, want[k]) for k, v in ck.model.state_dict().items())
    assert not ck.model.training
    x = torch.rand(3, cfg.window, cfg.input_size)
    model.eval()
    assert torch.equal(ck.model(x), model(x))


def test_no_temp_file_left_after_save(saved):
    path, *_ = saved
    assert sorted(p.name for p in path.parent.iterdir()) == ["AAPL.pt"]


def test_truncated_file_is_refused_naming_it(saved):
    path, *_ = saved
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=str(path)):
        load_checkpoint(path)


def test_corrupted_bytes_are_refused(saved):
    path, *_ = saved
    data = bytearray(path.read_bytes())
    for i in range(200, len(data), 97):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="AAPL.pt"):
        load_checkpoint(path)


def test_sha_mismatch_and_wrong_ticker_are_refused(saved):
    path, sha, *_ = saved
    with pytest.raises(CheckpointError, match="does not match the registry"):
        load_checkpoint(path, expected_sha256="0" * 64)
    with pytest.raises(CheckpointError, match="belongs to ticker AAPL"):
        load_checkpoint(path, ticker="NVDA")


@pytest.mark.parametrize(
    "content",
    [b"not a checkpoint at all", b"", "plain-dict", "plain-tensor"],
    ids=["text", "empty", "foreign-dict", "foreign-tensor"],
)
def test_foreign_files_are_refused(tmp_path, content):
    path = tmp_path / "foreign.pt"
    if content == "plain-dict":
        torch.save({"weights": torch.zeros(3)}, path)
    elif content == "plain-tensor":
        torch.save(torch.zeros(3), path)
    else:
        path.write_bytes(content)
    with pytest.raises(CheckpointError, match="foreign.pt"):
        load_checkpoint(path)


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(tmp_path / "nope.pt")


def test_mismatched_architecture_is_refused(saved, tmp_path):
    path, _, model, cfg = saved
    payload = torch.load(path, weights_only=True)
    payload["signature"] = "0" * 16
    bad = tmp_path / "bad_sig.pt"
    torch.save(payload, bad)
    with pytest.raises(CheckpointError, match="bad_sig.pt"):
        load_checkpoint(bad)
    payload = torch.load(path, weights_only=True)
    payload["state_dict"].pop("lstm.weight_hh_l0")
    torch.save(payload, tmp_path / "bad_state.pt")
    with pytest.raises(CheckpointError, match="inconsistent"):
        load_checkpoint(tmp_path / "bad_state.pt")


def _refusal(loader, *args, **kw) -> str:
    with pytest.raises(CheckpointError) as err:
        loader(*args, **kw)
    return str(err.value)


def test_load_weights_are_the_modules_weights_and_predict_the_same(saved):
    path, sha, model, cfg = saved
    ck, w = load_checkpoint(path, sha, "AAPL"), load_weights(path, sha, "AAPL")
    assert isinstance(w.model, Weights) and w.model.cfg == cfg
    assert (w.config, w.signature, w.trained_on_date, w.val_loss, w.metrics, w.sha256) == (
        ck.config, ck.signature, ck.trained_on_date, ck.val_loss, ck.metrics, ck.sha256,
    )  # fmt: skip
    want = ck.model.state_dict()
    assert w.model.tensors.keys() == want.keys()
    assert all(torch.equal(v, want[k]) for k, v in w.model.tensors.items())
    x = torch.rand(2, cfg.window, cfg.input_size)
    assert torch.equal(batched_forward([w.model, w.model], x), batched_forward([ck.model, ck.model], x))


def test_load_weights_refuses_what_load_checkpoint_refuses_with_the_same_words(saved, tmp_path):
    path, sha, _, _ = saved
    payload = torch.load(path, weights_only=True)
    payload["state_dict"].pop("lstm.weight_hh_l0")
    torch.save(payload, tmp_path / "bad_state.pt")
    payload = torch.load(path, weights_only=True)
    payload["state_dict"]["lstm.weight_ih_l0"] = torch.zeros(3, 3)
    torch.save(payload, tmp_path / "bad_shape.pt")
    payload = torch.load(path, weights_only=True)
    payload["signature"] = "0" * 16
    torch.save(payload, tmp_path / "bad_sig.pt")
    (tmp_path / "text.pt").write_bytes(b"not a checkpoint")
    cases = [
        ((tmp_path / "bad_state.pt",), {}, "inconsistent"),
        ((tmp_path / "bad_shape.pt",), {}, "inconsistent"),
        ((tmp_path / "bad_sig.pt",), {}, "architecture"),
        ((tmp_path / "text.pt",), {}, "cannot be read"),
        ((tmp_path / "nope.pt",), {}, "missing"),
        ((path,), {"expected_sha256": "0" * 64}, "does not match the registry"),
        ((path,), {"ticker": "NVDA"}, "belongs to ticker AAPL"),
    ]
    for args, kw, words in cases:
        message = _refusal(load_weights, *args, **kw)
        assert words in message and message == _refusal(load_checkpoint, *args, **kw)


def test_load_weights_casts_other_dtypes_as_the_module_would(saved, tmp_path):
    path, _, model, cfg = saved
    payload = torch.load(path, weights_only=True)
    payload["state_dict"] = {k: v.double() for k, v in payload["state_dict"].items()}
    torch.save(payload, tmp_path / "f64.pt")
    w = load_weights(tmp_path / "f64.pt").model
    want = model.state_dict()
    assert all(v.dtype == torch.float32 and torch.equal(v, want[k]) for k, v in w.tensors.items())


class Exploit:
    """Unpickling this would run a shell command that creates a marker file."""

    marker = ""

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickled_code_is_refused_without_running(tmp_path, saved):
    marker = tmp_path / "pwned"
    Exploit.marker = str(marker)
    path, *_ = saved
    # A real checkpoint with the exploit smuggled into it, and a bare exploit pickle.
    payload = torch.load(path, weights_only=True)
    payload["metrics"] = {"note": Exploit()}
    smuggled = tmp_path / "smuggled.pt"
    torch.save(payload, smuggled)
    bare = tmp_path / "bare.pt"
    bare.write_bytes(pickle.dumps(Exploit()))
    # Sanity: the payload really would run code under a plain unpickler.
    assert b"system" in zipfile.ZipFile(smuggled).read("smuggled/data.pkl")
    for f in (smuggled, bare):
        with pytest.raises(CheckpointError, match=f.name):
            load_checkpoint(f)
    assert not marker.exists()


def test_write_atomic_leaves_nothing_on_failure(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "m.pt"
    write_atomic(target, b"old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new contents")
    assert target.read_bytes() == b"old"
    assert [p.name for p in target.parent.iterdir()] == ["m.pt"]


def test_clean_temp_files_removes_only_temps(tmp_path):
    (tmp_path / f"{TEMP_PREFIX}abc").write_bytes(b"half")
    (tmp_path / "keep.pt").write_bytes(b"x")
    assert clean_temp_files(tmp_path) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["keep.pt"]
