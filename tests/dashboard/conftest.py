"""Streamlit's script runner installs each page it runs as `sys.modules["__main__"]` and leaves it there:
multiprocessing's spawn start method would then re-run that page in every worker process later tests
start (a pool of training workers crashed on the page's own import). Put the real `__main__` back."""

import sys

import pytest


@pytest.fixture(autouse=True)
def _restore_main_module():
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main
