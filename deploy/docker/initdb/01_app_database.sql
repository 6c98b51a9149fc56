-- The application tables live in their own database beside Dagster's instance storage.
-- LDTM creates its tables itself (Alembic migrations on first use).
CREATE DATABASE ldtm;
