"""ldtm_core.accountability."""
