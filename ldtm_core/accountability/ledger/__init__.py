"""ldtm_core.accountability.ledger."""
