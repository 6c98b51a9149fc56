"""The forecast dashboard: a thin Streamlit app over `ldtm_core.accountability.board.reports` and `ldtm_core.accountability.board.leaderboard`.

Run it with `ldtm dashboard` (Streamlit flags pass through) or `make dashboard`. Pages read the
application database only through ldtm_core functions; there is no SQL here.
"""

from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"
