"""ldtm_core.data."""
