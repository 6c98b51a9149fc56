from ldtm_core.cli import app

app()
