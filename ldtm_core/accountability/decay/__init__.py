"""ldtm_core.accountability.decay.decay."""
