"""The record outside the database: `ldtm receipts` (keys, receipts, rotation), `ldtm audit export` and
`ldtm verify-record`, the check an outsider runs without the database or any secret."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ldtm_core.cli.accountability import audit_app
from ldtm_core.cli.common import app, console, err_console, handle_errors, open_db
from ldtm_core.config import masked_url, redact_secrets
from ldtm_core.errors import ConfigError

receipts_app = typer.Typer(
    help="Signed receipts of the record, kept outside the database.", no_args_is_help=True
)
app.add_typer(receipts_app, name="receipts")


def _sink_and_key():
    from ldtm_core.accountability.ledger import receipts as rc

    sink, key = rc.Sink.configured(), rc.signing_key()
    if sink is None or key is None:
        raise ConfigError(
            f"set {rc.DIR_ENV} (the receipts folder) and {rc.KEY_ENV} or {rc.SEED_ENV} (the signing key) first"
        )
    return sink, key


@receipts_app.command("public-key")
@handle_errors
def receipts_public_key() -> None:
    """Print the public half of the configured signing key (PEM): what verifiers need."""
    from ldtm_core.accountability.ledger.receipts import KEY_ENV, SEED_ENV, public_pem, signing_key

    key = signing_key()
    if key is None:
        raise ConfigError(f"set {KEY_ENV} or {SEED_ENV} (the signing key) first")
    typer.echo(public_pem(key.public_key()).decode(), nl=False)


@receipts_app.command("keygen")
@handle_errors
def receipts_keygen(
    private: Annotated[Path, typer.Option("--private", help="the new private key file (mode 600)")],
    public: Annotated[Path, typer.Option("--public", help="the new public key file: hand it to verifiers")],
) -> None:
    """Create an Ed25519 key pair for signing receipts (never over an existing file)."""
    from ldtm_core.accountability.ledger.receipts import keygen

    kid = keygen(private.expanduser(), public.expanduser())
    console.print(f"key {kid}: private {escape(str(private))} (keep it secret), public {escape(str(public))}")


@receipts_app.command("check")
@handle_errors
def receipts_check() -> None:
    """Check every receipt setting as the nightly will, before it writes anything: the folder, the key
    (and that it is the chain's current one), git and its remote (which must refuse forced pushes), the
    timestamp authority's URL."""
    from ldtm_core.accountability.ledger import receipts as rc

    ready = rc.ready()
    if ready is None:
        raise ConfigError(f"{rc.DIR_ENV} is not set: no receipts are written")
    sink = ready.sink
    console.print(
        f"receipts folder {escape(str(sink.directory))}; signing key {rc.key_id(ready.key.public_key())}"
    )
    if sink.git:
        console.print("git: a repository, one commit per receipt")
    if sink.remote:
        where = sink.remote_path()
        said = (
            f"{escape(str(where))} refuses forced pushes"
            if where is not None and where.exists()
            else "over the network: not checked here; it must refuse forced pushes (e.g. branch protection)"
        )
        console.print(f"remote {escape(sink.remote)}: {said}")
    console.print(f"timestamp authority: {escape(masked_url(ready.tsa_url) if ready.tsa_url else 'none')}")
    console.print("receipts: ok")


@receipts_app.command("issue")
@handle_errors
def receipts_issue() -> None:
    """Write a receipt for every snapshot row no receipt covers yet (the nightly does this after each
    evening; run it after a failed receipt)."""
    from ldtm_core.accountability.ledger.receipts import issue

    sink, key = _sink_and_key()
    receipt = issue(open_db(), sink, key)
    if receipt is None:
        console.print("receipts: every row is covered already")
        return
    body = receipt.body
    console.print(
        f"receipt {body['seq']}: rows {body['first_id']}-{body['last_id']} ({len(body['rows'])}), "
        f"evenings {', '.join(body['run_dates'])}, root {body['merkle_root'][:16]} -> {escape(str(receipt.path))}"
    )


@receipts_app.command("watch")
@handle_errors
def receipts_watch(
    every: Annotated[float, typer.Option("--every", min=1.0, help="seconds between two looks")] = 30.0,
    once: Annotated[bool, typer.Option("--once", help="one look, then exit")] = False,
    heartbeat: Annotated[
        Path | None,
        typer.Option("--heartbeat", help="a file touched after every look that worked (healthcheck)"),
    ] = None,
) -> None:
    """The signer: every EVERY seconds a receipt for the committed rows no receipt covers yet, timestamped
    where LDTM_TSA_URL is set; each signature logged. Run it where the key is and nothing else is (the
    compose stack's ldtm_signer, as the read-only role): the processes that write rows never hold the key.
    One signer per receipts folder. A failed look is logged and tried again at the next."""
    import time

    from ldtm_core.accountability.ledger import receipts as rc

    ready = rc.ready()
    if ready is None:
        raise ConfigError(f"set {rc.DIR_ENV} (the receipts folder) and the signing key first")
    engine = open_db()
    who = rc.key_id(ready.key.public_key())
    console.print(f"signer: key {who}, receipts in {escape(str(ready.sink.directory))}, every {every:g} s")
    while True:
        try:
            receipt = rc.after_predict(engine, ready)
        except Exception as exc:  # noqa: BLE001 - the loop outlives a failed look; the next one retries
            err_console.print(
                f"signer: no receipt this time: {escape(redact_secrets(str(exc)).splitlines()[0])}"
            )
            receipt = None
        else:
            if heartbeat is not None:
                heartbeat.parent.mkdir(parents=True, exist_ok=True)
                heartbeat.touch()
        if receipt is not None:
            body = receipt.body
            console.print(
                f"signed receipt {body['seq']} with key {who}: rows {body['first_id']}-{body['last_id']} "
                f"({len(body['rows'])}), evenings {', '.join(body['run_dates'])}, sha256 {receipt.sha256} "
                f"-> {escape(receipt.path.name)}",
                soft_wrap=True,  # one line per signature in the signer's log
            )
        if once:
            return
        time.sleep(every)


@receipts_app.command("stamp")
@handle_errors
def receipts_stamp() -> None:
    """Ask the timestamp authority (LDTM_TSA_URL) for a token for every receipt without one (the nightly
    stamps each evening's; run this after a failed one: the token then carries the later time)."""
    from ldtm_core.accountability.ledger import receipts as rc
    from ldtm_core.accountability.ledger.timestamps import URL_ENV, configured_url

    sink, _ = _sink_and_key()
    url = configured_url()
    if not url:
        raise ConfigError(f"set {URL_ENV} (the timestamp authority's URL) first")
    missing = rc.unstamped(rc.read_receipts(sink.directory))
    for receipt in missing:
        path = rc.stamp(sink, receipt, url)
        console.print(f"receipt {receipt.seq}: timestamped -> {escape(str(path))}")
    if not missing:
        console.print("receipts: every receipt is timestamped already")


@receipts_app.command("rotate")
@handle_errors
def receipts_rotate(
    new_key: Annotated[
        Path | None, typer.Option("--new-key", help="the next private key file (`ldtm receipts keygen`)")
    ] = None,
    new_seed_from: Annotated[
        str | None,
        typer.Option(
            "--new-seed-from", help="the environment variable holding the next seed (32+ characters)"
        ),
    ] = None,
) -> None:
    """Introduce the next signing key with a receipt signed by the current one; then point
    LDTM_RECEIPT_KEY_FILE at the new key file, or set LDTM_RECEIPT_KEY to the new seed."""
    from ldtm_core.accountability.ledger.receipts import key_from_seed, load_private_key, rotate
    from ldtm_core.config import env_named

    if (new_key is None) == (new_seed_from is None):
        raise ConfigError("give the next key as --new-key FILE or --new-seed-from VARIABLE (one of them)")
    if new_key is not None:
        new, then = (
            load_private_key(new_key.expanduser(), "--new-key"),
            f"LDTM_RECEIPT_KEY_FILE={escape(str(new_key))}",
        )
    else:  # the seed by name, never on the command line (shell history, the process list)
        seed = env_named(new_seed_from)
        if not seed:
            raise ConfigError(f"--new-seed-from {new_seed_from}: that environment variable is empty or unset")
        new, then = (
            key_from_seed(seed, f"--new-seed-from {new_seed_from}"),
            f"LDTM_RECEIPT_KEY to the value of {new_seed_from}",
        )
    sink, key = _sink_and_key()
    receipt = rotate(sink, key, new.public_key())
    console.print(
        f"receipt {receipt.body['seq']}: key {receipt.body['key_id']} introduces {receipt.body['new_key_id']}; "
        f"set {then} now"
    )


@audit_app.command("export")
@handle_errors
def audit_export(
    out: Annotated[Path, typer.Argument(help="a new or empty folder")],
    tickers: Annotated[list[str] | None, typer.Option("--tickers", "-t", help="only these tickers")] = None,
) -> None:
    """Export the record (snapshots, the closes the fills read, corporate actions; Parquet with a
    manifest) for `ldtm verify-record`, which needs no database."""
    from ldtm_core.accountability.ledger.record_export import export_record

    manifest = export_record(open_db(), out.expanduser(), [t.upper() for t in tickers] if tickers else None)
    files = ", ".join(f"{name} ({f['rows']} rows)" for name, f in manifest["files"].items())
    console.print(f"exported {manifest['tickers']} tickers to {escape(str(out))}: {files}")


@app.command("verify-record")
@handle_errors
def verify_record(
    export: Annotated[Path, typer.Argument(help="the folder `ldtm audit export` wrote")],
    receipts: Annotated[Path, typer.Argument(help="the receipts folder (or a clone of its git repository)")],
    public_key: Annotated[Path, typer.Option("--public-key", help="the receipts' first public key (PEM)")],
    tsa_certs: Annotated[
        Path | None,
        typer.Option(
            "--tsa-certs", help="the timestamp authority's certificate chain (PEM): checks the tokens"
        ),
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="the checkpoint kept from an earlier check: fails unless today's record extends it; "
            "today's is then written there (a new file starts one)",
        ),
    ] = None,
) -> None:
    """Check an exported record against its signed receipts: no database, no secret. Exit 0 ok, 1 on any
    finding (each names the ticker and evening), 2 when the input cannot be used (the file and why)."""
    from ldtm_core.accountability.ledger import record_checkpoint
    from ldtm_core.accountability.ledger.receipts import load_public_key
    from ldtm_core.accountability.ledger.record_verify import assurance
    from ldtm_core.accountability.ledger.record_verify import verify_record as run
    from ldtm_core.accountability.ledger.timestamps import load_chain

    chain = load_chain(tsa_certs.expanduser()) if tsa_certs else None
    kept = record_checkpoint.read(checkpoint.expanduser()) if checkpoint else None
    public = load_public_key(public_key.expanduser())
    report = run(export.expanduser(), receipts.expanduser(), public, chain, kept)
    for f in report.findings:
        err_console.print(f"{f.kind}: {f.ticker or '-'} {f.run_date}: {escape(f.detail)}")
    console.print(_board_table(report.board, report.revised_answers > 0))
    for line in assurance(report):
        console.print(line)
    if not report.ok:
        err_console.print(f"[bold red]verify-record: {len(report.findings)} finding(s)[/]")
        raise typer.Exit(1)
    if checkpoint and report.head is not None:  # kept only from a check that passed
        record_checkpoint.write(checkpoint.expanduser(), report.head)
        started = "" if kept else " (a new checkpoint: there was none at that path)"
        console.print(
            f"checkpoint: receipt {report.head.seq} ({report.head.run_date}), {report.head.tree_size} rows, "
            f"kept in {escape(str(checkpoint))}{started}: pass it next time"
        )
    console.print("verify-record ok")


def _board_table(board, revised: bool) -> Table:
    """The recomputed board, then the rows counted apart (replay, in-sample, ungated) under their group;
    with revisions, accuracy on the answers first published beside it."""
    pct = lambda v: "–" if v != v else f"{v:.1%}"  # noqa: E731 - NaN: nothing decided
    extra = ["accuracy on the original answers"] if revised else []
    table = Table(
        "counted", "ticker", "evenings", "rows", "next-day calls decided", "right", "accuracy", *extra,
        title="the board, recomputed (other rows counted apart)",
    )  # fmt: skip
    for r in board.itertuples(index=False):
        more = [pct(r.accuracy_original)] if revised else []
        evenings = str(r.first) if r.first == r.last else f"{r.first} – {r.last}"
        table.add_row(
            r.group, r.ticker, evenings, str(r.rows), str(r.decided), str(r.right), pct(r.accuracy), *more
        )
    return table
