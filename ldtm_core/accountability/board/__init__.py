"""ldtm_core.accountability.board."""
