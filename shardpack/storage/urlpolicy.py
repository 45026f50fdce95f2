"""Which image URLs may be fetched and how (FetchPolicy, the address and opt-out rules), without
the network stack: the scan and `pack --help` import this; a worker's fetching is storage.fetch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shardpack.errors import StorageError
from shardpack.storage.base import EXTRAS
from shardpack.storage.locations import LOCAL_SCHEMES, is_url

WEB_SCHEMES = ("http", "https")
USER_AGENT = "shardpack (image dataset packer; honours X-Robots-Tag noai)"
# URL schemes an image path may have: the web's, the local disk's (file://, local://: as an
# absolute path) and object stores' (fsspec; memory:// for tests). Another that fsspec knows
# (ftp://, sftp://, smb://) would connect where no address is checked: refused by name.
IMAGE_SCHEMES = frozenset({*WEB_SCHEMES, *LOCAL_SCHEMES, *EXTRAS, "az", "abfs", "abfss", "memory",
                           "hf"})  # fmt: skip
# img2dataset's default disallowed_header_directives: a site's opt-out of AI training sets.
OPT_OUT = frozenset({"noai", "noimageai", "noindex", "noimageindex"})
_AGENT_TOKEN = "shardpack"  # X-Robots-Tag: "shardpack: noai" is aimed at us, "otherbot: ..." not
# Never fetched, whatever is allowed: link-local (169.254.169.254 is every major cloud's
# metadata service) and AWS's IPv6 metadata address.
NEVER = ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128")
# Seconds to accept a connection, between two reads, and for one whole answer (a slow drip);
# --storage-option connect_timeout=S / read_timeout=S / total_timeout=S change them.
TIMEOUTS = {"connect_timeout": 10.0, "read_timeout": 30.0, "total_timeout": 120.0}
# the longest one may be: a socket's timeout overflows past ~292 years, and an answer waited for
# over a day is no answer
MOST_TIMEOUT_S = 86_400
# Seconds one image URL may take in all, from its first request: tries, redirects, backoff and
# Retry-After waits together (--url-deadline). Room for the longest Retry-After waited for (60 s)
# at each of the default 2 retries; a server dripping bytes is given up at it, not kept through
# three answers of total_timeout and the backoff between them (~6 minutes).
DEADLINE_S = 180.0


@dataclass(frozen=True)
class FetchPolicy:
    """How a worker fetches URLs (PackOptions' URL flags, and the storage options' timeouts)."""

    retries: int = 2
    allow_private: bool = False
    opt_out: bool = True  # honour X-Robots-Tag's OPT_OUT directives
    user_agent: str = USER_AGENT
    threads: int = 128  # requests in flight per worker: in flight / latency bounds the rate
    per_host: int = 16  # of those, to one host at most
    max_redirects: int = 5
    connect_timeout: float = TIMEOUTS["connect_timeout"]
    read_timeout: float = TIMEOUTS["read_timeout"]
    total_timeout: float = TIMEOUTS["total_timeout"]
    deadline: float = DEADLINE_S  # one URL's, all tries together (Fetcher's Deadline)
    # a body whose header declares more pixels is refused at its head, not read to the byte
    # cap (--max-pixels); None: bounded by the cap alone
    max_pixels: int | None = None

    @classmethod
    def of(cls, options, storage_options: Mapping[str, object] | None = None) -> FetchPolicy:
        """The policy PackOptions and --storage-option's timeouts give."""
        given = {k: _seconds(k, v) for k, v in (storage_options or {}).items() if k in TIMEOUTS}
        return cls(
            retries=options.retries,
            allow_private=options.allow_private_urls,
            opt_out=not options.ignore_opt_out,
            user_agent=options.user_agent or USER_AGENT,
            threads=options.url_threads,
            per_host=options.per_host,
            max_pixels=options.max_pixels,
            deadline=options.url_deadline,
            **given,
        )


def stray_timeouts(storage_options: Mapping[str, object] | None) -> list[str]:
    """A warning for each --storage-option meant as an image URL's timeout that sets none: a
    key holding "timeout" or a typo away from one of TIMEOUTS (img2dataset's `timeout`,
    `read_timout`), which only SRC's and OUT's filesystems are given."""
    import difflib

    warnings = []
    for key, value in (storage_options or {}).items():
        said = key.lower().replace("-", "_")
        near = difflib.get_close_matches(said, TIMEOUTS, n=1, cutoff=0.8)
        if key in TIMEOUTS or not (near or "timeout" in said):
            continue
        meant = near[0] if near else "read_timeout"
        warnings.append(f"--storage-option {key}={value} sets no image URL's timeout (it goes "
                        "to SRC's and OUT's filesystems alone): image URLs take "
                        f"{', '.join(TIMEOUTS)}, img2dataset's timeout is read_timeout; for "
                        f"image URLs, pass {meant}={value}")  # fmt: skip
    return warnings


# Where curl, requests and urllib find a proxy; image URLs are fetched without one.
_PROXY_VARIABLES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy",
                    "ALL_PROXY")  # fmt: skip
# What a failure is when this machine reaches the web only through a proxy.
_UNREACHED = ("DNS failure", "connection refused", "timed out", "network error")


def proxy_ignored(reasons: Iterable[str]) -> str | None:
    """A note, where the environment names a proxy (HTTPS_PROXY, ...) and a URL failed as one
    unreached (`reasons`: the failures'), that image URLs are fetched directly: the address
    checks judge the address connected to, which a proxy would be; else None."""
    named = next((name for name in _PROXY_VARIABLES if os.environ.get(name)), None)
    if named is None or not any(reason.startswith(_UNREACHED) for reason in reasons):
        return None
    return (
        f"{named} is set, but image URLs are fetched directly, never through a proxy (each "
        "address connected to is checked): a machine that reaches the web only through "
        "one reaches none of them"
    )


def _seconds(key: str, value: object) -> float:
    """A timeout given as --storage-option KEY=SECONDS."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MOST_TIMEOUT_S
    ):
        raise StorageError(f"--storage-option {key}={value!r}: give a number of seconds above 0, "
                           f"at most {MOST_TIMEOUT_S}")  # fmt: skip
    return float(value)


def refused_scheme(path: str) -> str | None:
    """Why an image path's URL scheme is refused (not one of IMAGE_SCHEMES), else None."""
    if not is_url(path):
        return None
    scheme = path.partition("://")[0].lower()
    if scheme in IMAGE_SCHEMES:
        return None
    return f"refused scheme: {scheme}:// is not http(s), the local disk's or an object store's"


def is_web_url(text: str) -> bool:
    """Whether `text` is an http(s) URL."""
    end = text.find("://", 0, 8)  # no copy of the rest of a long URL: this runs a row
    return end > 0 and text[:end].lower() in WEB_SCHEMES


def status_of(reason: str) -> int | None:
    """The HTTP status a failure's reason names (`... (HTTP 404)`), else None."""
    match = re.search(r"\(HTTP (\d{3})\b", reason)
    return int(match[1]) if match else None


# How storage.fetch's reasons for a failure a retry can mend begin (beside HTTP 5xx and 429):
# `pack --update` asks those URLs again.
TRANSIENT = ("timed out", "connection refused", "connection reset", "connection cut",
             "network error")  # fmt: skip
NETWORK_ERROR = "network error: "

# OpenSSL's reasons for an SSL error that is the connection ending under TLS (an EOF: Python's
# SSLEOFError under OpenSSL 3), no verdict of TLS: a network error, which a retry may mend.
_TLS_ENDED = frozenset({"UNEXPECTED_EOF_WHILE_READING"})


def tls_verdict(said: str) -> str | None:
    """OpenSSL's reason where an SSL error's text ("[SSL: CODE] ...") is a verdict of TLS, the
    same answer at every try (storage.fetch says it as "TLS failed", permanent); None for any
    other text, the connection ending under TLS among them. An older shardpack kept such an
    error as "network error: [SSL: CODE] ...": is_transient reads it by the same verdict."""
    found = re.match(r"\[SSL: (\w+)\]", said)
    return found[1] if found and found[1] not in _TLS_ENDED else None


def is_transient(reason: str) -> bool:
    """Whether a URL's failure is one a later try may mend: no answer in time, a refused, reset
    or cut connection, HTTP 5xx or 429 (not 4xx, DNS, TLS, an opt-out, a refused address, a body
    over the cap, not an image); a reason kept by an older shardpack as it reads now."""
    if reason.startswith(NETWORK_ERROR) and tls_verdict(reason[len(NETWORK_ERROR) :]):
        return False  # an older shardpack's TLS failure ("TLS failed" now)
    status = status_of(reason)
    return reason.startswith(TRANSIENT) or (status is not None and (status == 429 or status >= 500))


def refusal(address: str, allow_private: bool) -> str | None:
    """Why an IP address is not connected to, or None."""
    import ipaddress  # here: only a worker connecting needs it

    ip = ipaddress.ip_address(address.partition("%")[0])  # an IPv6 zone is no part of it
    if ip.version == 6:  # one that carries an IPv4 address to it is judged by that address
        ip = ip.ipv4_mapped or ip.sixtofour or _translated(ip) or ip
    never = map(ipaddress.ip_network, NEVER)
    if any(ip in net for net in never if net.version == ip.version):
        return f"refused address: {ip} is link-local or a cloud metadata address"
    if not allow_private and not ip.is_global:
        return (f"refused address: {ip} is private, loopback or reserved; "
                "--allow-private-urls fetches it")  # fmt: skip
    return None


# IPv6 prefixes whose last 32 bits are an IPv4 address a network takes the packet to: NAT64's
# well-known and local-use prefixes (RFC 6052, 8215) and the old IPv4-compatible form (::/96,
# but for :: and ::1)
EMBEDDING = ("64:ff9b::/96", "64:ff9b:1::/48", "::/96")


def _translated(ip):
    """The IPv4 address in an IPv6 address of EMBEDDING, else None."""
    import ipaddress

    if ip.is_loopback or ip.is_unspecified:
        return None
    if any(ip in ipaddress.ip_network(prefix) for prefix in EMBEDDING):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def opted_out(values: list[str]) -> str | None:
    """The opt-out directive among X-Robots-Tag values aimed at every agent or at shardpack
    (img2dataset's reading of the header), else None."""
    for value in values:
        agent, colon, rest = value.partition(":")
        if colon and "," not in agent:  # "agent: directives" ("noindex, x: y" is directives)
            if agent.strip().lower() != _AGENT_TOKEN:
                continue
            value = rest
        for directive in value.split(","):
            if directive.strip().lower() in OPT_OUT:
                return directive.strip().lower()
    return None
