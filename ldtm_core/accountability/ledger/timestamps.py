"""RFC 3161 timestamps of the receipts: a timestamp authority's signed word that a receipt existed by
its time, on a clock the operator does not hold.

When `LDTM_TSA_URL` names a timestamp authority, each receipt's SHA-256 (of the file's bytes, the hash the
next receipt names) is sent to it as an RFC 3161 request over HTTP; its signed response is kept beside the
receipt as `<receipt>.tsr`. The verifier checks a token against the TSA's certificate chain, given by the
verifier and not taken from the token (`rfc3161-client`), and then holds each row the receipt covers to
the TSA's time instead of the issuer's own.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import cryptography.x509
from rfc3161_client import (
    HashAlgorithm,
    PKIStatus,
    TimestampRequestBuilder,
    VerificationError,
    VerifierBuilder,
    decode_timestamp_response,
)

from ldtm_core.config import env_text, masked_url
from ldtm_core.errors import ConfigError, LDTMError

URL_ENV = "LDTM_TSA_URL"
SUFFIX = ".tsr"
TIMEOUT_S = 30


class TimestampError(LDTMError):
    """A timestamp could not be had from the TSA, or a token does not verify."""


def token_path(receipt_path: Path) -> Path:
    """Where a receipt's token lives: beside it, its name plus `.tsr`."""
    return receipt_path.with_name(receipt_path.name + SUFFIX)


def configured_url() -> str | None:
    url = env_text(URL_ENV)
    if url and (not url.startswith(("https://", "http://")) or not urllib.parse.urlsplit(url).hostname):
        raise ConfigError(
            f"{URL_ENV} {masked_url(url)!r}: a timestamp authority is reached over http(s) at a host"
        )
    return url or None


def fetch(url: str, data: bytes, timeout: float = TIMEOUT_S) -> bytes:
    """The TSA's response (DER) for `data`, after checking it answers this request: granted, over this
    data's SHA-256, with this request's nonce."""
    request = (
        TimestampRequestBuilder()
        .data(data)
        .hash_algorithm(HashAlgorithm.SHA256)
        .nonce(nonce=True)
        .cert_request(cert_request=True)
        .build()
    )
    http = urllib.request.Request(  # noqa: S310 - the scheme is checked (configured_url)
        url,
        data=request.as_bytes(),
        headers={"Content-Type": "application/timestamp-query", "Accept": "application/timestamp-reply"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(http, timeout=timeout) as answer:  # noqa: S310
            raw = answer.read()
    except (OSError, urllib.error.URLError) as e:
        raise TimestampError(f"timestamp authority {masked_url(url)}: {e}") from None
    try:
        response = decode_timestamp_response(raw)
    except ValueError as e:
        raise TimestampError(
            f"timestamp authority {masked_url(url)}: not an RFC 3161 response ({e})"
        ) from None
    # Only "granted": the verifier (rfc3161-client) refuses "granted with modifications" too.
    if PKIStatus(response.status) != PKIStatus.GRANTED:
        said = "; ".join(response.status_string) or f"status {response.status}"
        raise TimestampError(f"timestamp authority {masked_url(url)} refused the request: {said}")
    info = response.tst_info
    if info.message_imprint.message != hashlib.sha256(data).digest() or info.nonce != request.nonce:
        raise TimestampError(f"timestamp authority {masked_url(url)}: its token answers another request")
    return raw


def load_chain(path: Path) -> list[cryptography.x509.Certificate]:
    """The TSA's certificates (PEM): its self-signed ones are the roots the tokens must chain to."""
    try:
        chain = cryptography.x509.load_pem_x509_certificates(Path(path).read_bytes())
    except (OSError, ValueError) as e:
        raise ConfigError(f"TSA certificates {path}: cannot be read as PEM certificates ({e})") from None
    if not any(c.subject == c.issuer for c in chain):
        raise ConfigError(f"TSA certificates {path}: no self-signed root among them")
    return chain


def verify(token: bytes, data: bytes, chain: list[cryptography.x509.Certificate]) -> dt.datetime:
    """The TSA's time for `data` when `token` is a granted timestamp of exactly these bytes, signed by a
    certificate that chains to a root of `chain`; a TimestampError saying why otherwise."""
    roots = [c for c in chain if c.subject == c.issuer]
    verifier = VerifierBuilder(roots=roots, intermediates=[c for c in chain if c not in roots]).build()
    try:
        response = decode_timestamp_response(token)
        verifier.verify_message(response, data)
    except (ValueError, VerificationError) as e:
        raise TimestampError(str(e)) from None
    return response.tst_info.gen_time.astimezone(dt.UTC)
