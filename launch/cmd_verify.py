"""``tar2tf verify OUTPUT``: check a finished dataset against its manifest.

OUTPUT is the manifest (``out/train.record.manifest.json``) or the output template the
job was given (``out/train-{}.record``).  Checks CRCs, sizes, file digests and counts of every
shard, parses every Example against the manifest schema, checks DALI index files and the
manifest totals; ``--decode-images`` also decodes every image.  PCR datasets are checked
against their index.  Exit 0 when everything matches, 5 on any mismatch (all listed), 2
when OUTPUT has no manifest or names a file that is not a tar2tf manifest.
"""

from __future__ import annotations

import json
import sys

from launch.args import plain
from launch.store_args import add_store_args, store_config

EXIT_MISMATCH = 5


def register(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check output shards against their manifest (exit 5 on mismatch)",
        description=plain(__doc__),
    )
    p.add_argument("output", help="manifest path, or the output template given to convert")
    p.add_argument(
        "--decode-images", action="store_true", help="also decode every image feature (Pillow)"
    )
    p.add_argument("--json", dest="json_path", help="write the report as JSON here ('-' = stdout)")
    add_store_args(p, etl=False)
    p.set_defaults(func=run)


def run(args) -> int:
    from pipelines.verify import NotAManifest, verify
    from transforms.redact import one_line, printable

    try:
        report = verify(args.output, args.decode_images, store_config(args))
    except FileNotFoundError as e:
        print(f"tar2tf verify: no manifest for {args.output}: {e}", file=sys.stderr)
        return 2
    except NotAManifest as e:  # what was given is not a tar2tf output: a usage error
        print(one_line(f"tar2tf verify: {args.output}: {e}"), file=sys.stderr)
        return 2
    except (ValueError, KeyError) as e:
        print(f"tar2tf verify: unreadable manifest for {args.output}: {e}", file=sys.stderr)
        return EXIT_MISMATCH
    if args.json_path == "-":
        json.dump(report.to_dict(), sys.stdout, indent=1, sort_keys=True)
        print()
        print(printable(report.text()), file=sys.stderr)
    else:
        print(printable(report.text()))
        if args.json_path:
            with open(args.json_path, "w") as f:
                json.dump(report.to_dict(), f, indent=1, sort_keys=True)
    return 0 if report.ok else EXIT_MISMATCH
