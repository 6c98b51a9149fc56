"""The recurrences inference writes out by hand, one per cell kind, each checked against torch's module.

`inference.batched_forward` runs M same-architecture models at once: each layer's weights are stacked
[M, ...] and the recurrence runs as batched matrix products. A cell kind is one entry of `CELLS`: the
torch module whose weights it reads (names `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`,
`bias_hh_l{k}`, gates in the module's order) and the layer that reproduces it in eval mode from a zero
state. tests/test_cells.py runs every entry against its module on random weights and inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

WEIGHTS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")

# (x [M, W, I], w_ih [M, G*H, I], w_hh [M, G*H, H], b_ih [M, G*H], b_hh [M, G*H]) -> h [M, W, H]
Layer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Cell:
    module: type[nn.RNNBase]  # torch's own: the weights' layout, and what the conformance test compares with
    layer: Layer


def lstm_layer(
    x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor, b_hh: torch.Tensor
) -> torch.Tensor:
    """One nn.LSTM layer for M models: gates i, f, g, o; both biases outside the recurrence."""
    m, h_size = x.shape[0], w_hh.shape[2]
    gx = torch.bmm(x, w_ih.transpose(1, 2)) + (b_ih + b_hh)[:, None, :]  # [M, W, 4H]
    h = x.new_zeros(m, h_size)
    c = x.new_zeros(m, h_size)
    w_hh_t = w_hh.transpose(1, 2)
    outs = []
    for t in range(x.shape[1]):
        gates = gx[:, t, :] + torch.bmm(h[:, None, :], w_hh_t)[:, 0, :]
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outs.append(h)
    return torch.stack(outs, dim=1)


CELLS: dict[str, Cell] = {"lstm": Cell(nn.LSTM, lstm_layer)}


def recurrence(
    kind: str,
    params: Sequence[Mapping[str, torch.Tensor]],
    x: torch.Tensor,
    num_layers: int,
    prefix: str = "",
) -> torch.Tensor:
    """The stacked recurrent module of M models (its weights `params[i]`, names after `prefix`), model i
    on x[i]: [M, W, I] -> the last layer's h at every step [M, W, H]."""
    layer = CELLS[kind].layer
    for k in range(num_layers):
        x = layer(x, *(torch.stack([p[f"{prefix}{name}_l{k}"] for p in params]) for name in WEIGHTS))
    return x
