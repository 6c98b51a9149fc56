"""Every hand-written recurrence (learning.cells.CELLS) against torch's own module with the same weights."""

from __future__ import annotations

import pytest
import torch

from ldtm_core.learning.cells import CELLS, recurrence
from ldtm_core.learning.inference import CELL
from ldtm_core.learning.model import LDTM, get_profile


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


def test_the_models_recurrent_module_is_a_registered_cell():
    """batched_forward reads LDTM's recurrent module under CELL: its kind and its state_dict prefix."""
    module = getattr(LDTM(get_profile("demo")), CELL)
    assert type(module) is CELLS[CELL].module
