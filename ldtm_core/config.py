"""Runtime settings, read from the environment with defaults that need nothing.

`LDTM_HOME` holds artifacts (checkpoints, exports, the default SQLite database),
`LDTM_DATABASE_URL` is any SQLAlchemy URL, `LDTM_UNIVERSE` picks the tickers.
Secrets only ever come from the environment; `masked_url` is what logs and errors show.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy.engine import make_url


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    universe: str = "full"  # the 103 tickers; the demo and the tests choose `demo` explicitly
    notify_webhook_url: str | None = None
    neutral_band_pct: float = 0.25
    extra: dict = field(default_factory=dict)

    @property
    def checkpoint_dir(self) -> Path:
        return self.home / "checkpoints"

    @property
    def export_dir(self) -> Path:
        return self.home / "exports"

    @classmethod
    def from_env(cls, **overrides) -> Settings:
        home = Path(overrides.pop("home", None) or os.environ.get("LDTM_HOME") or "./.ldtm").resolve()
        url = overrides.pop("database_url", None) or os.environ.get("LDTM_DATABASE_URL")
        if not url:
            url = f"sqlite:///{home / 'ldtm.db'}"
        universe = overrides.pop("universe", None) or os.environ.get("LDTM_UNIVERSE") or "full"
        band = float(os.environ.get("LDTM_NEUTRAL_BAND_PCT", "0.25"))
        return cls(
            home=home,
            database_url=url,
            universe=universe,
            notify_webhook_url=os.environ.get("LDTM_NOTIFY_WEBHOOK_URL") or None,
            neutral_band_pct=overrides.pop("neutral_band_pct", band),
            **overrides,
        )

    def ensure_dirs(self) -> None:
        for d in (self.home, self.checkpoint_dir, self.export_dir):
            d.mkdir(parents=True, exist_ok=True)


def masked_url(url: str) -> str:
    """The URL with any password replaced by ***, safe for logs, metadata and errors."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL must still never leak what follows '://user:'
        if "@" in url and "://" in url:
            scheme, rest = url.split("://", 1)
            return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
        return url


def mask_secrets(text: str, url: str) -> str:
    """Remove the password of `url` from an arbitrary message (driver errors echo DSNs)."""
    try:
        password = make_url(url).password
    except Exception:
        return text
    return text.replace(str(password), "***") if password else text
