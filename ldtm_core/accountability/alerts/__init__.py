"""ldtm_core.accountability.alerts."""
