"""ldtm_core.accountability.gate.gate."""
