"""Which exceptions are a disk's or an object store's failure, and the one line that says so."""

from __future__ import annotations

from shardpack.errors import printable

# Where the exceptions of the packages a URL's filesystem reaches its store through live. What
# they raise that is not an OSError (a refused connection, a malformed bucket name) is the
# store's answer, not a bug of ours: store_failure turns it into one line. fsspec itself is
# not among them: what it raises that is no OSError is a bug of its caller's, ours.
_STORE_MODULES = ("botocore.", "aiobotocore.", "s3fs.", "gcsfs.", "adlfs.", "aiohttp.", "azure.",
                  "google.auth.", "google.api_core.", "google.cloud.")  # fmt: skip


def is_store_failure(e: BaseException) -> bool:
    """Whether `e` is the disk's or a store's failure (an OSError, or store_failure's)."""
    return isinstance(e, OSError) or store_failure(e) is not None


def store_failure(e: BaseException) -> str | None:
    """One line for an exception that came out of a URL's filesystem, or None for any other
    (judged by where its class lives and where it was raised: botocore raises ValueError for
    a malformed endpoint)."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    raised_in = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    if not any(f"{m}.".startswith(_STORE_MODULES) for m in (raised_in, type(e).__module__)):
        return None
    what = said(e, 300)
    if isinstance(e, TypeError) and "unexpected keyword argument" in what:
        return f"a --storage-option is not one the filesystem takes ({what})"
    return (f"the object store refused or could not be reached: {what}; check the URL, the "
            "endpoint (AWS_ENDPOINT_URL or --storage-option endpoint_url=...) and the "
            "credentials")  # fmt: skip


def said(e: BaseException, most: int) -> str:
    """What an exception says, on one line, escaped, at most `most` characters of it."""
    return printable(" ".join(str(e).split())[:most]) or type(e).__name__
