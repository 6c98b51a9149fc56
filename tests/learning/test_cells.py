"""Every hand-written recurrence (learning.cells.CELLS) against torch's own module with the same weights."""

from __future__ import annotations

import pytest
import torch

from ldtm_core.errors import InputError
from ldtm_core.learning.cells import CELLS, recurrence
from ldtm_core.learning.inference import RECURRENT, batched_forward
from ldtm_core.learning.model import LDTM, ModelConfig, get_profile


@pytest.mark.parametrize("kind", sorted(CELLS))
@pytest.mark.parametrize(("num_layers", "hidden"), [(1, 7), (3, 16)])
def test_each_cell_matches_its_torch_module(kind, num_layers, hidden):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    m, window, inputs = 5, 12, 4
    modules = []
    for seed in range(m):
        torch.manual_seed(seed)
        mod = CELLS[kind].module(inputs, hidden, num_layers=num_layers, batch_first=True).eval()
        with torch.no_grad():  # biases away from torch's small init, so a misplaced one shows
            for p in mod.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        modules.append(mod)
    x = torch.randn(m, window, inputs, generator=g)
    with torch.no_grad():
        got = recurrence(kind, [dict(mod.named_parameters()) for mod in modules], x, num_layers)
        want = torch.cat([mod(x[i : i + 1])[0] for i, mod in enumerate(modules)])
    assert got.shape == (m, window, hidden)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", sorted(CELLS))
def test_a_model_of_each_cell_predicts_the_same_batched_as_alone(kind):
    """The config's `cell` builds the module and picks the recurrence inference writes out, under the
    state_dict prefix batched_forward reads."""
    torch.manual_seed(0)
    cfg = ModelConfig.from_dict({**get_profile("demo").to_dict(), "cell": kind})
    models = [LDTM(cfg).eval() for _ in range(3)]
    assert all(type(getattr(md, RECURRENT.rstrip("."))) is CELLS[kind].module for md in models)
    x = torch.randn(3, cfg.window, cfg.input_size)
    with torch.no_grad():
        alone = torch.cat([md(x[i : i + 1]) for i, md in enumerate(models)])
    torch.testing.assert_close(batched_forward(models, x), alone, atol=1e-5, rtol=1e-5)


def test_an_lstm_config_keeps_its_stored_form_and_an_unknown_cell_is_refused():
    demo = get_profile("demo")
    assert demo.cell == "lstm" and "cell" not in demo.to_dict() and "cell" not in demo.architecture
    with pytest.raises(InputError, match="cell='transformer'"):
        ModelConfig.from_dict({**demo.to_dict(), "cell": "transformer"})
