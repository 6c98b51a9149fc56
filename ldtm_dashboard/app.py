"""Entry point: `streamlit run ldtm_dashboard/app.py` (what `ldtm dashboard` runs)."""

from pathlib import Path

import streamlit as st

# Not `pages/`: that name would switch on Streamlit's file-based navigation beside st.navigation.
VIEWS = Path(__file__).resolve().parent / "views"

st.set_page_config(page_title="LDTM forecasts", layout="wide")
page = st.navigation(
    [
        st.Page(VIEWS / "leaderboard.py", title="Leaderboard", url_path="leaderboard", default=True),
        st.Page(VIEWS / "ticker.py", title="Ticker", url_path="ticker"),
        st.Page(VIEWS / "runs.py", title="Runs", url_path="runs"),
        st.Page(VIEWS / "decay.py", title="Decay", url_path="decay"),
        st.Page(VIEWS / "signals.py", title="Signals", url_path="signals"),
    ]
)
page.run()
