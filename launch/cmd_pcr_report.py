"""``tar2tf pcr-report DIR``: bytes, MS-SSIM and PSNR per scan group of a PCR dataset.

Prints a table and saves it as JSON plus a PNG plot (default ``DIR/PCR_report.json`` and
``DIR/PCR_report.png``).  MS-SSIM and PSNR compare each sampled image at k scan groups
with the same image at all of them.  See docs/pcr.md.
"""

from __future__ import annotations

import os
import sys

from launch.args import int_in, plain


def register(sub) -> None:
    p = sub.add_parser(
        "pcr-report",
        help="quality and bytes per scan group of a PCR dataset",
        description=plain(__doc__),
    )
    p.add_argument("directory", help="PCR dataset directory (PCR_index.pb + record files)")
    p.add_argument(
        "--sample",
        type=int_in(0),
        default=32,
        help="images compared (evenly spaced; default 32; 0: bytes per group only; "
        "more than the dataset has: all)",
    )
    p.add_argument("--json", help="where to save the JSON report (default DIR/PCR_report.json)")
    p.add_argument("--png", help="where to save the plot (default DIR/PCR_report.png)")
    p.set_defaults(func=run)


def run(args) -> int:
    from transforms.pcr import quality as pcr_quality

    directory = args.directory.rstrip("/")
    if not os.path.exists(os.path.join(directory, "PCR_index.pb")):
        print(f"tar2tf pcr-report: {directory}/PCR_index.pb not found", file=sys.stderr)
        return 2
    if args.sample and not args.verbose:
        # MS-SSIM and PSNR are TensorFlow's: imported here without its start-up log
        # (oneDNN, CPU features, no CUDA driver, cuInit), which says nothing about the
        # report; as quiet as the other commands, which import no TensorFlow.  -v shows it.
        from pipelines.tfdata.tfquiet import quiet_import

        quiet_import()
    rep = pcr_quality.report(directory, sample=args.sample)
    json_path = args.json or os.path.join(directory, "PCR_report.json")
    png_path = args.png or os.path.join(directory, "PCR_report.png")
    pcr_quality.save(rep, json_path, png_path)
    print(pcr_quality.format_table(rep))
    print(f"saved: {json_path} {png_path}")
    return 0
