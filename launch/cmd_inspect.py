"""``tar2tf inspect SHARD``: the schema and first records of a TFRecord shard, plus a
PNG contact sheet of its first images with their labels.

Images are the bytes features named like an image extension (``jpg``, ``png`` ...) and
uint8 array features (``name`` + ``name/shape`` + ``name/dtype``, what Decode/Resize
store).  The label is ``--label`` or the first of cls/label/class/txt that a record has.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from launch.args import int_in, plain
from launch.store_args import add_store_args, store_config
from transforms.ops.image_names import IMAGE_EXTENSIONS
from transforms.stores import StoreConfig, basename, get_store

LABEL_NAMES = ("cls", "label", "class", "txt")
THUMB = 128
ARROW_SAMPLE = 256
MAX_SHEET_IMAGES = (
    1024  # 8 x 128 thumbnails: a 1060 x 19k pixel PNG, already more than one looks at
)


def register(sub) -> None:
    p = sub.add_parser(
        "inspect",
        help="print a shard's schema and records; PNG contact sheet of its images",
        description=plain(__doc__),
    )
    p.add_argument(
        "shard",
        help="a TFRecord file: local path, ais://, gs://, s3://, https:// or a Beam filesystem",
    )
    p.add_argument(
        "-n",
        "--records",
        type=int_in(0),
        default=3,
        help="records to print (default 3; 0: the schema only; more than the shard has: all)",
    )
    p.add_argument("--sheet", help="contact sheet PNG path (default ./<shard name>.contact.png)")
    p.add_argument(
        "--images",
        type=int_in(1, MAX_SHEET_IMAGES),
        default=16,
        help=f"images on the contact sheet (1..{MAX_SHEET_IMAGES}, default 16; none: --no-sheet)",
    )
    p.add_argument(
        "--label", help="feature to print under each image (default cls/label/class/txt)"
    )
    p.add_argument("--no-sheet", action="store_true", help="do not write a contact sheet")
    add_store_args(p, etl=False)
    p.set_defaults(func=run)


def _value_text(value: Any, limit: int = 60) -> str:
    if isinstance(value, np.ndarray):
        return f"array {value.dtype} {list(value.shape)}"
    if isinstance(value, (bytes, bytearray)):
        if len(value) <= limit:
            try:
                return repr(value.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        return f"<{len(value)} bytes>"
    if isinstance(value, list):
        return f"[{len(value)} values]"
    return repr(value)


def _image_of(rec: Dict[str, Any]):
    """The first image of a parsed record as a PIL image, or None."""
    from PIL import Image

    for name in sorted(rec):
        v = rec[name]
        if name.lower() in IMAGE_EXTENSIONS and isinstance(v, (bytes, bytearray)):
            try:
                im = Image.open(io.BytesIO(v))
                im.load()
                return im.convert("RGB")
            except Exception:
                continue
        if isinstance(v, np.ndarray) and v.dtype == np.uint8 and v.ndim in (2, 3):
            return Image.fromarray(v if v.ndim == 2 or v.shape[2] in (3, 4) else v[..., 0]).convert(
                "RGB"
            )
    return None


def _label_of(rec: Dict[str, Any], label: Optional[str]) -> str:
    for name in [label] if label else LABEL_NAMES:
        if name in rec:
            v = rec[name]
            if isinstance(v, (bytes, bytearray)):
                v = v.decode("utf-8", "replace")
            return str(v)[:20]
    return ""


def contact_sheet(
    items: List[Tuple[Any, str]],
    path: str,
    thumb: int = THUMB,
    config: Optional[StoreConfig] = None,
) -> Tuple[int, int]:
    """Grid of thumbnails with a caption line under each; returns (columns, rows)."""
    from PIL import Image, ImageDraw

    cols = max(1, min(8, len(items)))
    rows = max(1, -(-len(items) // cols))
    cap = 14
    sheet = Image.new("RGB", (cols * (thumb + 4) + 4, rows * (thumb + cap + 6) + 4), "white")
    draw = ImageDraw.Draw(sheet)
    for i, (im, caption) in enumerate(items):
        x = 4 + (i % cols) * (thumb + 4)
        y = 4 + (i // cols) * (thumb + cap + 6)
        t = im.copy()
        t.thumbnail((thumb, thumb))
        sheet.paste(t, (x + (thumb - t.width) // 2, y + (thumb - t.height) // 2))
        draw.text((x + 2, y + thumb + 2), caption, fill="black")
    store = get_store(path, config)
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")
    store.write_bytes(path, buf.getvalue())
    return cols, rows


def arrow_schema(payloads: List[bytes]):
    """The Arrow schema tfx-bsl's Example decoder (the one TFX and TFDV use) gives these
    serialized Examples: what a TFX pipeline reading the shards will see."""
    from tfx_bsl.coders import example_coder

    return example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(payloads).schema


@contextlib.contextmanager
def _payloads(shard: str, config: Optional[StoreConfig], read_records):
    """The serialized records of a TFRecord shard, or of an ArrayRecord shard (named
    ``*.array_record``; one in a bucket is copied to a local temporary file first, since
    ``array_record`` reads local paths)."""
    if not shard.endswith(".array_record"):
        with get_store(shard, config).open_read(shard) as f:
            yield read_records(f)
        return
    from transforms.arrayrecord import format as arf
    from transforms.stores import split_url

    if split_url(shard)[0] == "":
        if not os.path.exists(split_url(shard)[2]):
            raise FileNotFoundError(shard)
        yield arf.iter_file(split_url(shard)[2])
        return
    with tempfile.NamedTemporaryFile(suffix=".array_record") as tmp:
        with get_store(shard, config).open_read(shard) as f:
            shutil.copyfileobj(f, tmp, 4 << 20)
        tmp.flush()
        yield arf.iter_file(tmp.name)


def inspect(
    shard: str,
    records: int = 3,
    images: int = 16,
    label: Optional[str] = None,
    config: Optional[StoreConfig] = None,
    out=None,
) -> List[Tuple[Any, str]]:
    """Print schema + records of ``shard`` to ``out`` (default: ``sys.stdout`` at the time
    of the call, not at import, so that a redirected stdout is honoured); return (image,
    caption) pairs for the sheet."""
    out = out if out is not None else sys.stdout
    from transforms.tfrecord import example as ex
    from transforms.tfrecord import schema as exs
    from transforms.tfrecord.framing import read_records

    schema: Dict[str, Any] = {}
    shown, count, sheet_items, head = [], 0, [], []
    with _payloads(shard, config, read_records) as payloads:
        for payload in payloads:
            count += 1
            if len(head) < ARROW_SAMPLE:
                head.append(payload)
            s = exs.schema_of(payload)
            schema = exs.merge_schema(schema, s) if schema else s
            if len(shown) < records or len(sheet_items) < images:
                rec = ex.parse_example(payload)
                if len(shown) < records:  # kept as text: -n larger than the shard prints all of it
                    shown.append([f"  {name:24s} {_value_text(rec[name])}" for name in sorted(rec)])
                if len(sheet_items) < images:
                    im = _image_of(rec)
                    if im is not None:
                        im.thumbnail(
                            (THUMB, THUMB)
                        )  # what the sheet shows; a full image per tile is MBs
                        sheet_items.append(
                            (im, f"{_label_of(rec, label)} {rec.get('__key__', '')}"[:24])
                        )
    from transforms.redact import printable

    print(printable(f"{shard}: {count} records"), file=out)
    print("schema:", file=out)
    for name, spec in schema.items():
        opt = " (optional)" if spec.get("optional") else ""
        print(printable(f"  {name:24s} {spec['dtype']:6s} {spec['shape']}{opt}"), file=out)
    if head:
        print(
            f"arrow schema (tfx-bsl, as TFX components see it; first {len(head)} records):",
            file=out,
        )
        for field in arrow_schema(head):
            print(f"  {field.name:24s} {field.type}", file=out)
    for i, lines in enumerate(shown):
        print(f"record {i}:", file=out)
        for line in lines:
            print(
                printable(line), file=out
            )  # names and values read from the shard: no terminal escapes
    return sheet_items


def run(args) -> int:
    config = store_config(args)
    try:
        items = inspect(
            args.shard, args.records, 0 if args.no_sheet else args.images, args.label, config
        )
    except FileNotFoundError as e:
        print(f"tar2tf inspect: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # CorruptRecordError, undecodable Example
        kind = "ArrayRecord" if args.shard.endswith(".array_record") else "TFRecord"
        print(f"tar2tf inspect: {args.shard} is not a readable {kind} file: {e}", file=sys.stderr)
        return 1
    if not args.no_sheet:
        if not items:
            print("no images found: no contact sheet written", file=sys.stderr)
        else:
            path = args.sheet or basename(args.shard) + ".contact.png"
            cols, rows = contact_sheet(items, path, config=config)
            print(f"contact sheet: {path} ({len(items)} images, {cols}x{rows})", file=sys.stderr)
    return 0
