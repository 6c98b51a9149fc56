"""A global recipe's fit within a time and memory budget (LDTM_RECIPE_FIT_TIMEOUT_S / _MEMORY_MIB).

By default a fit has an hour. With no limit at all (a timeout of 0 and no memory budget) it runs in this
process (`tabular.fit`). Otherwise it runs in a spawned child process (about 1.5 s to start): memory
through RLIMIT_DATA (the process's heap and anonymous mappings, its imports included: about 0.5 GiB
before the fit allocates anything), time by the parent killing the child at the deadline. The child returns the family's `dump` of its fitted state as
strict JSON text and the parent rebuilds it with `load`, so nothing but data crosses back; a fit over
budget, or one whose child dies, is refused by recipe name (InputError) and nothing is written.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from dataclasses import dataclass

import numpy as np

from ldtm_core.config import setting_float, setting_int
from ldtm_core.errors import InputError, summary
from ldtm_core.learning.recipes import RECIPES
from ldtm_core.learning.recipes.family import RecipeConfig, family, inputs_of

MIB = 1 << 20


@dataclass(frozen=True)
class FitBudget:
    timeout_s: float | None = None
    memory_mib: int | None = None

    @classmethod
    def from_env(cls) -> FitBudget:
        # A timeout of 0 is no time limit.
        return cls(
            setting_float("LDTM_RECIPE_FIT_TIMEOUT_S") or None, setting_int("LDTM_RECIPE_FIT_MEMORY_MIB")
        )

    @property
    def limited(self) -> bool:
        return self.timeout_s is not None or self.memory_mib is not None


def fit(x, y, cfg: RecipeConfig, budget: FitBudget | None = None):
    """`tabular.fit(x, y, cfg)`, within `budget` (default: the settings')."""
    from ldtm_core.learning.recipes import tabular

    budget = budget or FitBudget.from_env()
    if not budget.limited:
        return tabular.fit(x, y, cfg)
    features = inputs_of(cfg).names(cfg)
    xs = tabular.as_matrix(x, features, f"{cfg.kind} fit: X")
    ys = tabular.as_matrix(y, tabular.target_columns(), f"{cfg.kind} fit: Y")
    ctx = mp.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=_child,
        args=(send, RECIPES[cfg.kind].family, xs, ys, cfg, budget.memory_mib),
        name=f"ldtm-fit-{cfg.kind}",
        daemon=True,
    )
    child.start()
    send.close()
    try:
        ready = receive.poll(budget.timeout_s)  # None: wait as long as it takes
        outcome = receive.recv() if ready else None
    except EOFError:  # the child died without a word (killed by the kernel, a crash in C)
        outcome = ("died", f"its process ended with exit code {child.exitcode}")
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        receive.close()
    who = f"recipe {cfg.kind}"
    if outcome is None:
        raise InputError(
            f"{who}: the fit exceeded its time budget of {budget.timeout_s:g} s (LDTM_RECIPE_FIT_TIMEOUT_S)"
        )
    kind, detail = outcome
    if kind == "memory":
        raise InputError(
            f"{who}: the fit exceeded its memory budget of {budget.memory_mib} MiB (LDTM_RECIPE_FIT_MEMORY_MIB)"
        )
    if kind != "ok":
        raise InputError(f"{who}: {detail}")
    fam = family(cfg.kind)
    state = fam.load(json.loads(detail), cfg, xs.shape[1])
    return tabular.TabularModel(config=cfg, estimator=state, features=features)


def _child(send, family_path: str, xs: np.ndarray, ys: np.ndarray, cfg, memory_mib: int | None) -> None:
    """In the spawned process: limit the heap, fit, send ("ok", the state as JSON) or why not."""
    import importlib
    import resource

    try:
        module, _, attr = family_path.partition(":")
        fam = getattr(importlib.import_module(module), attr)
        if memory_mib is not None:  # the process's whole data segment, its imports (~0.5 GiB) included
            limit = int(memory_mib) * MIB
            resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        text = json.dumps(fam.dump(fam.fit(xs, ys, cfg)), allow_nan=False)
        send.send(("ok", text))
    except MemoryError:
        send.send(("memory", ""))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, by name
        send.send(("error", summary(exc)))
    finally:
        send.close()
