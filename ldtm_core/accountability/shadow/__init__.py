"""ldtm_core.accountability.shadow.shadow."""
