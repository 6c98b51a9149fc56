"""Entry point: `streamlit run ldtm_dashboard/app.py` (what `ldtm dashboard` runs)."""

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).resolve().parent / "pages"

st.set_page_config(page_title="LDTM forecasts", layout="wide")
page = st.navigation(
    [
        st.Page(PAGES / "leaderboard.py", title="Leaderboard", url_path="leaderboard", default=True),
        st.Page(PAGES / "ticker.py", title="Ticker", url_path="ticker"),
        st.Page(PAGES / "runs.py", title="Runs", url_path="runs"),
    ]
)
page.run()
