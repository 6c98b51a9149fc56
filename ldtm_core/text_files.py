"""Reading a small text file a user names (a universe list, a membership history): one `InputError`
naming the file and what is wrong with it, never a traceback, and never a blocking open of a pipe."""

from __future__ import annotations

import stat
from pathlib import Path

from ldtm_core.errors import InputError

_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")


def check_text_file(path: str | Path, what: str) -> Path:
    """`path` as a regular file, or an InputError saying what it is instead (absent, a folder, a pipe)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except OSError as exc:
        raise InputError(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{what} {p} is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise InputError(
            f"{what} {p} is not a regular file (a pipe, socket or device): give a saved text file"
        )
    return p


def read_text_file(path: str | Path, what: str) -> str:
    """The file's text, UTF-8 (a leading byte-order mark, as Notepad and Excel write, dropped)."""
    p = check_text_file(path, what)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{what} {p} cannot be read: {exc.strerror or exc}") from None
    if raw.startswith(_UTF16_MARKS):
        raise InputError(f"{what} {p} is UTF-16 text: save it as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{what} {p} is not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x})"
        ) from None
    if "\x00" in text:
        raise InputError(f"{what} {p} is not a text file (it holds NUL bytes)")
    return text
