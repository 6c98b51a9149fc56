"""The ticker universe and the one validator every ticker passes before it reaches a path or a query."""

from __future__ import annotations

import difflib
import re
from importlib import resources
from pathlib import Path

from ldtm_core.errors import InputError
from ldtm_core.text_files import read_text_file

# Letters, digits, '.', '-' and '^' (BRK.B, BF-B, ^VIX); nothing that can climb a path or end a string.
TICKER_PATTERN = re.compile(r"^[A-Z0-9.\-^]{1,12}$")
NAMED_UNIVERSES = ("demo", "full")


def validate_ticker(raw: object) -> str:
    """Return the canonical (upper-case) ticker or raise InputError saying what is wrong."""
    if not isinstance(raw, str):
        raise InputError(f"ticker must be a string, got {type(raw).__name__}")
    ticker = raw.strip().upper()
    if not TICKER_PATTERN.match(ticker) or ticker in {".", ".."} or ticker.startswith("."):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise InputError(
            f"invalid ticker {shown!r}: expected 1-12 characters of A-Z, 0-9, '.', '-', '^' (not starting with '.')"
        )
    return ticker


def _read_list(text: str, source: str) -> list[str]:
    tickers: list[str] = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        item = line.split("#", 1)[0].strip()
        for part in filter(None, (p.strip() for p in item.split(","))):
            try:
                tickers.append(validate_ticker(part))
            except InputError as exc:
                raise InputError(f"{source}:{line_no}: {exc}") from None
    if not tickers:
        raise InputError(f"{source}: the universe is empty")
    return list(dict.fromkeys(tickers))


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name no file system holds (too long): not a file
        return False


def load_universe(spec: str = "full") -> list[str]:
    """Resolve `demo`, `full` (any case), a comma list (`AAPL,NVDA`) or a path to a file of tickers.

    A single word that is not upper case and is close to a keyword (`Ful`, `dmeo`) is refused as a
    likely typo instead of becoming a one-ticker universe; upper case (`FUL`) is taken as a ticker.
    """
    spec = (spec or "full").strip()
    if spec.lower() in NAMED_UNIVERSES:
        name = spec.lower()
        text = resources.files("ldtm_core").joinpath("universe", f"{name}.txt").read_text()
        return _read_list(text, f"universe {name}")
    path = Path(spec)
    # A comma list is a list (a dot in it is a share class: BRK.B), however long; a path has a folder,
    # a suffix or exists.
    if "/" in spec or ("," not in spec and (path.suffix or _exists(path))):
        return _read_list(read_text_file(path, "universe file"), str(path))
    if "," not in spec and not spec.isupper():
        # `all` is what `--tickers all` says for the universe: here it means `full`, not the ticker ALL.
        aliases = {"all": "full"}
        close = [aliases[spec.lower()]] if spec.lower() in aliases else None
        close = close or difflib.get_close_matches(spec.lower(), NAMED_UNIVERSES, n=1, cutoff=0.6)
        if close:
            raise InputError(
                f"universe {spec!r} is neither a keyword ({', '.join(NAMED_UNIVERSES)}), a file, nor a ticker "
                f"list: did you mean {close[0]!r}? (write a one-ticker universe in upper case)"
            )
    try:
        return _read_list(spec, "LDTM_UNIVERSE")
    except InputError as exc:
        raise InputError(
            f"universe {spec!r} is neither a keyword ({', '.join(NAMED_UNIVERSES)}), an existing file, nor a "
            f"comma list of valid tickers: {exc}"
        ) from None


STATED_AS_OF = re.compile(r"membership as of (\d{4}-\d{2}-\d{2})", re.IGNORECASE)


def stated_as_of(spec: str = "full") -> str | None:
    """The day a named list (or list file) says its membership is as of (a `# Membership as of
    YYYY-MM-DD ...` comment line); None when it says nothing (a comma list, a file without the line)."""
    spec = (spec or "full").strip()
    if spec.lower() in NAMED_UNIVERSES:
        text = resources.files("ldtm_core").joinpath("universe", f"{spec.lower()}.txt").read_text()
    elif Path(spec).is_file():
        text = read_text_file(spec, "universe file")
    else:
        return None
    for line in text.splitlines():
        if "#" in line and (found := STATED_AS_OF.search(line.split("#", 1)[1])):
            return found.group(1)
    return None


EMPTY_TICKERS = (
    "--tickers is empty: name the tickers (e.g. AAPL,NVDA), or leave the option out "
    "(`train`: --tickers all) for the whole universe"
)


def parse_ticker_list(values: str | list[str] | None) -> list[str] | None:
    """A `--tickers` value (a comma list, or repeated options) as validated tickers; None when not given.

    One rule for every command: an explicitly empty value (`--tickers ""`, `--tickers ,`) is an error,
    never a silent "all".
    """
    if values is None:
        return None
    items = [values] if isinstance(values, str) else list(values)
    tickers = [validate_ticker(t) for v in items for t in str(v).split(",") if t.strip()]
    if not tickers:
        raise InputError(EMPTY_TICKERS)
    return list(dict.fromkeys(tickers))


def resolve_tickers(
    selection: str | list[str] | None, universe: list[str], allow_new: bool = False
) -> list[str]:
    """Tickers from a CLI/config selection; all of the universe when None (or an empty config list).

    An explicitly empty string is refused (see `parse_ticker_list`). Unknown tickers are refused.
    """
    if selection is None or (isinstance(selection, list) and not selection):
        return list(universe)
    tickers = parse_ticker_list(selection)
    unknown = [t for t in tickers if t not in universe]
    if unknown and not allow_new:
        raise InputError(
            f"ticker(s) not in the universe: {', '.join(unknown)} (pass --allow-new to accept them)"
        )
    return list(dict.fromkeys(tickers))
