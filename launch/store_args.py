"""Object-store options shared by every subcommand that reads or writes buckets
(``convert``, ``pcr``, ``verify``, ``inspect``): endpoints, headers, retry bounds, timeouts,
AIS ETL.  See docs/object-stores.md."""

from __future__ import annotations

from launch.args import int_in, seconds, size
from transforms.stores import StoreConfig
from transforms.stores.base import MAX_SECONDS

# the options in seconds: (flag, StoreConfig field, help)
_SECONDS = (
    ("--retry-initial", "retry_initial_s", "first backoff in seconds, doubling after each fault"),
    ("--retry-max", "retry_max_s", "longest single backoff in seconds"),
    ("--retry-total", "retry_total_s", "give up a request this many seconds after its first fault"),
    ("--read-timeout", "read_timeout_s", "seconds to wait for a server's answer or next bytes"),
)
# each of them is more than 0 and at most transforms.stores.base.MAX_SECONDS


def add_store_args(p, etl: bool = True) -> None:
    """Object-store endpoints, headers and retry settings (docs/object-stores.md).
    ``etl``: also ``--ais-etl-name``, for the subcommands that read input shards; an ETL
    transforms what it serves, so reading a job's output back through one makes no sense."""
    d = StoreConfig()
    g = p.add_argument_group("object stores (ais://, gs://, s3://, http(s)://)")
    g.add_argument("--ais-endpoint", help="AIStore proxy URL (default $AIS_ENDPOINT)")
    g.add_argument(
        "--s3-endpoint",
        help="S3-compatible server URL (default $AWS_ENDPOINT_URL, else AWS); "
        "credentials from the usual AWS variables / profiles",
    )
    g.add_argument(
        "--http-header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header sent with every http(s):// shard request, e.g. 'Authorization: Bearer ...' "
        "(repeatable; also $TAR2TF_HTTP_HEADERS, one per line); never printed or recorded",
    )
    g.add_argument(
        "--http-header-cross-origin",
        action="store_true",
        help="also send the --http-header values after a redirect to another scheme, host or "
        "port (default: dropped there; also $TAR2TF_HTTP_HEADER_CROSS_ORIGIN=1)",
    )
    g.add_argument(
        "--retry-attempts",
        type=int_in(1),
        default=d.retry_attempts,
        help=f"tries per request on transient faults: 5xx, 429, reset, short body (default {d.retry_attempts})",
    )
    for flag, field, text in _SECONDS:
        g.add_argument(
            flag,
            type=seconds,
            default=getattr(d, field),
            help=f"{text} (default {getattr(d, field)}; at most {MAX_SECONDS})",
        )
    g.add_argument(
        "--min-read-rate",
        type=size,
        metavar="SIZE",
        help="a shard read that averages fewer bytes per second than this over "
        "--read-timeout seconds of reading is abandoned (a fetch reject), e.g. 10KB; "
        "ends sources that trickle (default: no minimum)",
    )
    if etl:
        g.add_argument(
            "--ais-etl-name",
            help="read AIS shards through this existing AIS ETL (untested: needs Kubernetes)",
        )


def _rate(text) -> int:
    """``--min-read-rate`` in bytes per second (0: not given)."""
    if not text:
        return 0
    from transforms.sizes import parse_size

    return int(parse_size(text))


def store_config(args) -> StoreConfig:
    if (
        args.retry_attempts < 1
        or min(args.retry_initial, args.retry_max, args.retry_total, args.read_timeout) <= 0
    ):
        raise ValueError("--retry-attempts must be >= 1 and retry/timeout seconds > 0")
    from transforms.stores.http_headers import env_cross_origin, headers_with

    return StoreConfig(
        # the job's own, shipped to its workers with its config: never this process's
        # environment, which remote workers do not see and later jobs would inherit
        http_headers=headers_with(getattr(args, "http_header", None) or []),
        http_cross_origin=bool(getattr(args, "http_header_cross_origin", False))
        or env_cross_origin(),
        ais_endpoint=args.ais_endpoint,
        retry_attempts=args.retry_attempts,
        retry_initial_s=args.retry_initial,
        retry_max_s=args.retry_max,
        retry_total_s=args.retry_total,
        read_timeout_s=args.read_timeout,
        min_read_rate=_rate(getattr(args, "min_read_rate", None)),
        ais_etl_name=getattr(args, "ais_etl_name", None),
        s3_endpoint=getattr(args, "s3_endpoint", None),
    )
