"""ldtm_core.learning."""
