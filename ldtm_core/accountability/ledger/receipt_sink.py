"""Where receipts are kept: a folder the database role cannot touch, optionally a git repository (a
commit per receipt, pushed to a remote that must refuse forced pushes) and a second, independent folder
(`LDTM_RECEIPTS_MIRROR`). Files are only ever added, never overwritten."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ldtm_core.config import env_text, setting_flag
from ldtm_core.errors import ConfigError, LDTMError

DIR_ENV, GIT_ENV = "LDTM_RECEIPTS_DIR", "LDTM_RECEIPTS_GIT"
REMOTE_ENV = "LDTM_RECEIPTS_GIT_REMOTE"
MIRROR_ENV = "LDTM_RECEIPTS_MIRROR"
SUFFIX = ".receipt.json"


class ReceiptError(LDTMError):
    """A receipt could not be written: the rows are in the database, uncovered until the next receipt."""


@dataclass(frozen=True)
class Sink:
    directory: Path
    git: bool = False
    remote: str | None = None  # a git remote of the sink's repository to push each commit to
    mirror: Path | None = None  # a second, independent folder each file is also written to

    @classmethod
    def configured(cls) -> Sink | None:
        raw = env_text(DIR_ENV)
        if not raw:
            return None
        git, remote = setting_flag(GIT_ENV), env_text(REMOTE_ENV)
        if remote and not git:
            raise ConfigError(f"{REMOTE_ENV} is set but {GIT_ENV} is not: only a git sink is pushed")
        mirror = Path(env_text(MIRROR_ENV)).expanduser() if env_text(MIRROR_ENV) else None
        if mirror is not None and mirror.resolve() == Path(raw).expanduser().resolve():
            raise ConfigError(f"{MIRROR_ENV} is {DIR_ENV} itself: a mirror is a second, independent folder")
        sink = cls(Path(raw).expanduser(), git, remote or None, mirror)
        if git:
            sink._check_repository()
        return sink

    def _check_repository(self) -> None:
        if shutil.which("git") is None:
            raise ConfigError(f"{GIT_ENV} is set but git is not installed (no git on PATH)")
        proc = subprocess.run(  # noqa: S603 - fixed git arguments, no shell
            ["git", "-C", str(self.directory), "rev-parse", "--show-toplevel"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode or Path(proc.stdout.strip()).resolve() != self.directory.resolve():
            raise ConfigError(
                f"{DIR_ENV} {self.directory} is not a git repository ({GIT_ENV} is set): `git init` it first"
            )
        if self.remote:
            self._check_remote()

    def remote_path(self) -> Path | None:
        """The remote's folder when it is on this host (None over the network, or no such remote)."""
        proc = subprocess.run(  # noqa: S603 - fixed git arguments, no shell
            ["git", "-C", str(self.directory), "remote", "get-url", self.remote],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode:
            raise ConfigError(f"{REMOTE_ENV} {self.remote}: no such remote of {self.directory}")
        url = proc.stdout.strip()
        if url.startswith("file://"):
            return Path(url[len("file://") :])
        if "://" in url or re.match(r"^[^/]+:", url):  # ssh://, https://, or scp-like host:path
            return None
        return (self.directory / url).resolve()

    def _check_remote(self) -> None:
        """A remote that takes `push -f` lets the newest receipts be replaced: refused where it can be read."""
        path = self.remote_path()
        if path is None or not path.exists():  # over the network, or away for now: the push says so
            return
        proc = subprocess.run(  # noqa: S603 - fixed git arguments, no shell
            ["git", "-C", str(path), "config", "--bool", "receive.denyNonFastForwards"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.stdout.strip() != "true":
            raise ConfigError(
                f"{REMOTE_ENV} {self.remote} ({path}) accepts forced pushes, which could replace the newest "
                f"receipts: `git -C {path} config receive.denyNonFastForwards true` first"
            )

    def put(self, name: str, data: bytes, message: str) -> Path:
        """Write a new file `name` (never over another); commit it when the sink is git."""
        path = self.directory / name
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(name + ".tmp")
            tmp.write_bytes(data)
            os.link(tmp, path)  # fails if a file of that name exists: never overwritten
            tmp.unlink()
        except OSError as e:
            raise ReceiptError(f"receipt file {path} cannot be written: {e}") from None
        if self.git:
            self._git(path, ["add", path.name], "not committed to git")
            self._git(path, ["commit", "-q", "-m", message], "not committed to git")
        if self.remote:
            # Every commit not on the remote yet: an evening whose push failed goes with the next one.
            self._git(path, ["push", "-q", self.remote, "HEAD"], f"committed but not pushed to {self.remote}")
        if self.mirror is not None:
            self._mirror(path)
        return path

    def _mirror(self, path: Path) -> None:
        """Copy every receipt and token the mirror lacks (an evening whose copy failed goes with the next);
        a file there that differs from this folder's is an error, never overwritten."""
        try:
            self.mirror.mkdir(parents=True, exist_ok=True)
            for here in sorted(self.directory.glob(f"*{SUFFIX}*")):
                there = self.mirror / here.name
                if here.name.endswith(".tmp"):
                    continue
                if not there.exists():
                    tmp = there.with_name(there.name + ".tmp")
                    tmp.write_bytes(here.read_bytes())
                    os.link(tmp, there)
                    tmp.unlink()
                elif here == path and there.read_bytes() != here.read_bytes():
                    raise ReceiptError(
                        f"{there} differs from {here}: the mirror was changed; nothing overwritten"
                    )
        except OSError as e:
            raise ReceiptError(f"{path.name} written but not mirrored to {self.mirror}: {e}") from None

    def _git(self, path: Path, args: list[str], failure: str) -> None:
        proc = subprocess.run(  # noqa: S603 - fixed git arguments, no shell
            ["git", "-C", str(self.directory), *args], capture_output=True, text=True, check=False
        )
        if proc.returncode:
            said = re.sub(r"://[^/@\s]+@", "://***@", (proc.stderr or proc.stdout).strip())  # URL credentials
            raise ReceiptError(f"{path.name} written but {failure} at {self.directory}: {said[-300:]}")
