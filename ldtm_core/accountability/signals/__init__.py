"""ldtm_core.accountability.signals.signals."""
