"""`yoloq dataset synth DIR ...`: write a small synthetic dataset for any task yoloq trains."""

from __future__ import annotations

import argparse
from pathlib import Path

from yoloq.commands._client import print_json
from yoloq.base.errors import UserError
from yoloq.domain.tasks import TRAINED_TASKS

MAX_SYNTH_IMAGES = 100_000
MAX_SYNTH_IMGSZ = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    synth = tools.add_parser("synth", help="write a synthetic shapes dataset (images, labels, data.yaml; classify: class folders)")
    synth.add_argument("dir", help="folder to write into (created if missing)")
    synth.add_argument("--train", type=int, default=16, help="training images (default 16)")
    synth.add_argument("--val", type=int, default=8, help="validation images (default 8)")
    synth.add_argument("--imgsz", type=int, default=64, help="image side in pixels (default 64)")
    synth.add_argument("--nc", type=int, default=3, help="number of classes, 1-8 (default 3)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--task", choices=TRAINED_TASKS, default="detect",
                       help="label format: detect boxes, segment polygons, pose keypoints (the 4 corners "
                            "of each box), obb rotated boxes (default detect)")
    synth.add_argument("--relative", action="store_true",
                       help="write `path: .` instead of the absolute folder into data.yaml")
    synth.add_argument("--json", action="store_true", help="print one JSON object")
    updated = tools.add_parser("updated", help="announce a changed dataset (emits dataset.updated; "
                                               "the retraining trigger resubmits its jobs)")
    updated.add_argument("data", help="the dataset YAML that changed")
    updated.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    if args.tool == "updated":
        return announce_update(args.data, args.json)
    from yoloq.datasets.synth import synth_dataset

    _check_synth_args(args)
    try:
        data_yaml = synth_dataset(args.dir, train=args.train, val=args.val, imgsz=args.imgsz,
                                  nc=args.nc, seed=args.seed, relative_path=args.relative, task=args.task)
    except ValueError as exc:
        raise UserError("dataset synth", str(exc), "see `yoloq dataset synth --help`") from None
    except OSError as exc:
        raise UserError("dir", f"cannot write into {args.dir}: {exc.strerror or exc}",
                        "give a folder you can write to") from None
    if args.json:
        print_json({"data": str(data_yaml), "train": args.train, "val": args.val, "imgsz": args.imgsz,
                    "nc": args.nc, "seed": args.seed, "task": args.task})
        return 0
    labels = "in class folders" if args.task == "classify" else f"{args.task} labels"
    print(f"wrote {args.train} train + {args.val} val images ({args.imgsz}px, {args.nc} classes, "
          f"{labels}): {data_yaml}")
    return 0


def _check_synth_args(args: argparse.Namespace) -> None:
    """Refuse what would fail half-way (a file where the folder goes) or never end (huge sizes)."""
    target = Path(args.dir).expanduser()
    blocker = next((p for p in (target, *target.parents) if p.exists() or p.is_symlink()), None)
    if blocker is not None and not blocker.is_dir():
        raise UserError("dir", f"{blocker} is a file (or a broken link), not a folder",
                        "give a new or existing folder")
    for name in ("train", "val"):
        if not 1 <= getattr(args, name) <= MAX_SYNTH_IMAGES:
            raise UserError(f"--{name}", f"{getattr(args, name)} is outside 1-{MAX_SYNTH_IMAGES:,}",
                            f"e.g. --{name} 16")
    if not 16 <= args.imgsz <= MAX_SYNTH_IMGSZ:
        raise UserError("--imgsz", f"{args.imgsz} is outside 16-{MAX_SYNTH_IMGSZ}", "e.g. --imgsz 64")
    if args.seed < 0:
        raise UserError("--seed", f"{args.seed} is negative", "use 0 or more")


def announce_update(data: str, as_json: bool = False) -> int:
    from yoloq.commands._client import stack_client

    path = Path(data).resolve()
    if not path.is_file():
        raise UserError("data", f"file not found: {path}", "give the path of the dataset YAML")
    with stack_client():
        from prefect.events import emit_event

        from yoloq.domain.contract import DATASET_UPDATED_EVENT, RESOURCE_DATASET_PATH, dataset_resource_id
        from yoloq.records.events import actor

        emit_event(event=DATASET_UPDATED_EVENT, resource={
            "prefect.resource.id": dataset_resource_id(path.parent.name),
            "prefect.resource.name": path.parent.name, RESOURCE_DATASET_PATH: str(path)},
            payload={"actor": actor()})
    if as_json:
        print_json({"event": "dataset.updated", "data": str(path)})
        return 0
    print(f"dataset.updated emitted for {path}; jobs that train on it will be retrained")
    return 0
