"""`yoloq dataset synth DIR ...`: write a small synthetic detection dataset."""

from __future__ import annotations

import argparse

from yoloq.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    tools = parser.add_subparsers(dest="tool", required=True, metavar="TOOL")
    synth = tools.add_parser("synth", help="write a synthetic shapes dataset (images, labels, data.yaml)")
    synth.add_argument("dir", help="folder to write into (created if missing)")
    synth.add_argument("--train", type=int, default=16, help="training images (default 16)")
    synth.add_argument("--val", type=int, default=8, help="validation images (default 8)")
    synth.add_argument("--imgsz", type=int, default=64, help="image side in pixels (default 64)")
    synth.add_argument("--nc", type=int, default=3, help="number of classes, 1-8 (default 3)")
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--relative", action="store_true",
                       help="write `path: .` instead of the absolute folder into data.yaml")
    updated = tools.add_parser("updated", help="announce a changed dataset (emits dataset.updated; "
                                               "the retraining trigger resubmits its jobs)")
    updated.add_argument("data", help="the dataset YAML that changed")


def run(args: argparse.Namespace) -> int:
    if args.tool == "updated":
        return announce_update(args.data)
    from yoloq.synth import synth_dataset

    try:
        data_yaml = synth_dataset(args.dir, train=args.train, val=args.val, imgsz=args.imgsz,
                                  nc=args.nc, seed=args.seed, relative_path=args.relative)
    except ValueError as exc:
        raise UserError("dataset synth", str(exc), "see `yoloq dataset synth --help`") from None
    print(f"wrote {args.train} train + {args.val} val images ({args.imgsz}px, {args.nc} classes): {data_yaml}")
    return 0


def announce_update(data: str) -> int:
    from pathlib import Path

    from yoloq.commands._client import stack_client

    path = Path(data).resolve()
    if not path.is_file():
        raise UserError("data", f"file not found: {path}", "give the path of the dataset YAML")
    with stack_client():
        from prefect.events import emit_event

        from yoloq.events import actor

        emit_event(event="dataset.updated", resource={
            "prefect.resource.id": f"yoloq.dataset.{path.parent.name}",
            "prefect.resource.name": path.parent.name, "yoloq.dataset.path": str(path)},
            payload={"actor": actor()})
    print(f"dataset.updated emitted for {path}; jobs that train on it will be retrained")
    return 0
