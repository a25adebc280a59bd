"""YOLO-NAS segment runner: train / evaluate / export with super-gradients, as a child process.

Run it with the YOLO-NAS environment's python (`yoloq engine install yolo-nas`);
it imports nothing from yoloq (standard library + torch + super_gradients only).

    python runner.py --request request.json              # train one segment
    python runner.py --evaluate --request request.json   # mAP50 / mAP50-95 of request["checkpoint"] on val
    python runner.py --export --checkpoint epoch-2.pt [--output m.onnx] [--imgsz 96] [--data data.yaml]

Request (JSON object; only "data" and "workdir" are required for training):
    arch             "yolo_nas_s" | "yolo_nas_m" | "yolo_nas_l"          (default yolo_nas_s)
    data             ultralytics data YAML: path / train / val / names (labels in ../labels/ beside images/)
    epochs           the job's total epochs (the LR schedule spans them)  (default 10)
    stop_after_epoch train epochs [done, stop_after_epoch) in this segment (default epochs)
    resume_from      checkpoint written by this runner, or null
    weights          (a fresh start) a finished checkpoint of this runner to fine-tune from: its
                     EMA weights (else its raw ones) initialise the model; same arch and classes
    workdir          where epoch-{n}.pt, best.pt and sg_logs/ go
    stop_file        path polled after every epoch (default workdir/STOP): preemption
    handshake        true: after each epoch_end short of stop_after_epoch, read one line from
                     stdin, "go" or "stop" (how yoloq's segment asks its preemption check,
                     with no race between the answer and the next epoch)
    device           "cpu" or "cuda" (the GPU the node agent gave the segment: CUDA_VISIBLE_DEVICES)
    formats          (export mode) ["onnx", "torchscript"]
    imgsz 640, batch 16, seed 0, lr0 5e-4, lrf 0.1, warmup_epochs 3, warmup_bias_ratio 0.01,
    optimizer "AdamW"|"SGD", momentum 0.9, weight_decay 1e-4, ema true, ema_decay 0.9997,
    augment true, val true, conf 0.01, iou 0.7, max_det 300, threads null (torch default),
    deterministic true, allow_network false, keep_checkpoints null (K: delete this segment's
    epoch-{n}.pt older than the last K; ~250 MB each for yolo_nas_s with AdamW + EMA)
    checkpoint       (evaluate mode) the checkpoint to evaluate

stdout carries only JSON lines (everything super-gradients prints goes to stderr):
    {"event":"start","epoch":done,"stop_after_epoch":n,"epochs":total,...}
    {"event":"epoch_end","epoch":n,"metrics":{...},"checkpoint":path,"seconds":s}   after every epoch
    {"event":"stopped","epoch":n}                                  stop file seen; then "done"
    {"event":"done","epochs_done":n,"finished":bool,"best":path|null}
    {"event":"evaluate","checkpoint":p,"metrics":{...}} / {"event":"export",...}
    {"event":"error","message":...}                                then exit status 1 (2: bad request)

Checkpoints hold plain state_dicts and plain types only (torch.load(weights_only=True) reads them):
    net, ema_net (or None), optimizer_state_dict, scheduler_state_dict, ema_updates, rng, epoch
    (epochs done), epochs, metrics, best_fitness, hyp, names, and a marker
    yoloq = {"engine": "yolo-nas", "arch", "resumable": epoch < epochs, "format": 1, ...}.
Resuming restores the model, EMA, optimizer, scheduler and all RNG streams (python, numpy,
torch, the shuffle generator), so N epochs in segments equal N epochs in one go bit for bit.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import shutil
import socket
import sys
import time

FORMAT = 1
_EVENTS = None  # the real stdout; fd 1 itself is pointed at stderr


def _take_stdout() -> None:
    """Keep the real stdout for JSON events; route fd 1 (prints, loggers, C code) to stderr."""
    global _EVENTS
    if _EVENTS is None:
        sys.stdout.flush()
        _EVENTS = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)


def emit(event: str, **fields) -> None:
    _EVENTS.write(json.dumps({"event": event, **fields}, default=float) + "\n")
    _EVENTS.flush()


class RequestError(Exception):
    pass


# ---------------------------------------------------------------- offline guard
def _guard_network() -> None:
    """Refuse every non-loopback connection and DNS look-up in this process."""
    def loopback(host) -> bool:
        host = str(host)
        return host in ("localhost", "::1", "") or host.startswith("127.")

    real_connect, real_connect_ex, real_gai = socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo

    def refuse(what: str, exc_type=OSError):
        message = f"yolonas runner: network is off ({what} refused)"
        sys.stderr.write(message + "\n")  # logged even where a library swallows the exception
        raise exc_type(message)

    def connect(self, address):
        if isinstance(address, tuple) and not loopback(address[0]):
            refuse(f"connect to {address[0]!r}")
        return real_connect(self, address)

    def connect_ex(self, address):
        if isinstance(address, tuple) and not loopback(address[0]):
            refuse(f"connect to {address[0]!r}")
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not loopback(host):
            refuse(f"lookup of {host!r}", socket.gaierror)
        return real_gai(host, *args, **kwargs)

    socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo = connect, connect_ex, getaddrinfo


def _offline_env(workdir: str) -> None:
    """Environment for super-gradients before it is imported: no crash-tip handler, no log upload,
    logs in the workdir, quiet console."""
    os.environ["CRASH_HANDLER"] = "FALSE"
    os.environ["UPLOAD_LOGS"] = "FALSE"
    os.environ.setdefault("SUPER_GRADIENTS_LOG_DIR", os.path.join(workdir, "sg_logs"))
    os.environ.setdefault("CONSOLE_LOG_LEVEL", "WARNING")
    os.environ.setdefault("FILE_LOG_LEVEL", "INFO")
    os.environ.setdefault("TQDM_DISABLE", "1")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "WANDB_MODE"):
        os.environ.setdefault(var, "1" if var != "WANDB_MODE" else "offline")


# ---------------------------------------------------------------- request
DEFAULTS = {
    "arch": "yolo_nas_s", "epochs": 10, "stop_after_epoch": None, "resume_from": None,
    "stop_file": None, "imgsz": 640, "batch": 16, "seed": 0, "lr0": 5e-4, "lrf": 0.1,
    "warmup_epochs": 3, "warmup_bias_ratio": 0.01, "optimizer": "AdamW", "momentum": 0.9,
    "weight_decay": 1e-4, "ema": True, "ema_decay": 0.9997, "augment": True, "val": True,
    "conf": 0.01, "iou": 0.7, "max_det": 300, "threads": None, "deterministic": True,
    "allow_network": False, "checkpoint": None, "keep_checkpoints": None, "device": "cpu",
    "handshake": False, "formats": ["onnx"], "split": "val", "weights": None,
}
HYP_KEYS = ("arch", "epochs", "imgsz", "batch", "seed", "lr0", "lrf", "warmup_epochs",
            "warmup_bias_ratio", "optimizer", "momentum", "weight_decay", "ema", "ema_decay", "augment")


def load_request(path: str | None, overrides: dict) -> dict:
    req = dict(DEFAULTS)
    if path:
        with open(path) as fh:
            given = json.load(fh)
        if not isinstance(given, dict):
            raise RequestError("the request must be a JSON object")
        unknown = set(given) - set(DEFAULTS) - {"data", "workdir"}
        if unknown:
            raise RequestError(f"unknown request fields: {sorted(unknown)}")
        req.update(given)
    req.update({k: v for k, v in overrides.items() if v is not None})
    req["_given"] = sorted((set(given) if path else set()) | {k for k, v in overrides.items() if v is not None})
    req["epochs"] = int(req["epochs"])
    req["stop_after_epoch"] = req["epochs"] if req["stop_after_epoch"] is None else int(req["stop_after_epoch"])
    if req["epochs"] < 1 or not 1 <= req["stop_after_epoch"] <= req["epochs"]:
        raise RequestError("need 1 <= stop_after_epoch <= epochs")
    if str(req["device"]) not in ("cpu", "cuda"):
        raise RequestError("device must be cpu or cuda")
    if not set(req["formats"]) <= {"onnx", "torchscript"}:
        raise RequestError("formats must be onnx and/or torchscript")
    if req["optimizer"] not in ("AdamW", "SGD"):
        raise RequestError("optimizer must be AdamW or SGD")
    return req


def parse_data(path: str) -> dict:
    """ultralytics data YAML -> {"names": [...], "train": (img_dir, lbl_dir), "val": (...)}."""
    import yaml

    with open(path) as fh:
        cfg = yaml.safe_load(fh) or {}
    root = cfg.get("path") or os.path.dirname(os.path.abspath(path))
    if not os.path.isabs(root):
        root = os.path.join(os.path.dirname(os.path.abspath(path)), root)
    names = cfg.get("names")
    if isinstance(names, dict):
        names = [names[k] for k in sorted(names, key=int)]
    if not names:
        names = [f"class{i}" for i in range(int(cfg.get("nc", 0)))]
    if not names:
        raise RequestError(f"{path}: no names / nc")
    out = {"names": [str(n) for n in names], "root": root}
    for split in ("train", "val", "test"):
        rel = cfg.get(split)
        if isinstance(rel, list):
            if len(rel) != 1:
                raise RequestError(f"{path}: {split} must be one folder for this prototype")
            rel = rel[0]
        if not rel:
            out[split] = None
            continue
        img = os.path.normpath(os.path.join(root, rel))
        if not os.path.isdir(img):
            raise RequestError(f"{path}: {split} folder {img} not found (list files are not supported)")
        sa, sb = f"{os.sep}images{os.sep}", f"{os.sep}labels{os.sep}"
        lbl = sb.join((img + os.sep).rsplit(sa, 1)).rstrip(os.sep) if sa in img + os.sep else img
        out[split] = (img, lbl if os.path.isdir(lbl) else img)
    if out["train"] is None:
        raise RequestError(f"{path}: no train folder")
    return out


# ---------------------------------------------------------------- super-gradients pieces
def _import_sg():
    import super_gradients  # noqa: F401  (after _offline_env)
    return super_gradients


def determinism(req: dict) -> None:
    import numpy as np
    import torch

    if req["threads"]:
        torch.set_num_threads(int(req["threads"]))
    if req["deterministic"]:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True
    seed = int(req["seed"])
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_model(arch: str, nc: int):
    from super_gradients.training import models

    return models.get(arch, num_classes=nc, pretrained_weights=None)


def make_dataset(split_dirs, names, imgsz: int, train: bool, augment: bool):
    from super_gradients.training.datasets.detection_datasets.yolo_format_detection import (
        YoloDarknetFormatDetectionDataset,
    )
    from super_gradients.training.transforms import transforms as T
    from super_gradients.training.datasets.data_formats.default_formats import LABEL_CXCYWH

    class SortedYoloDataset(YoloDarknetFormatDetectionDataset):
        """os.listdir order is the file system's: sort, so sample i is the same file everywhere."""

        def _setup_data_source(self) -> int:
            n = super()._setup_data_source()
            pairs = sorted(zip(self.images_file_names, self.labels_file_names))
            self.images_file_names = [p[0] for p in pairs]
            self.labels_file_names = [p[1] for p in pairs]
            return n

    img_dir, lbl_dir = split_dirs
    common = os.path.commonpath([img_dir, lbl_dir])
    tf = []
    if train and augment:
        tf += [
            T.DetectionRandomAffine(degrees=0.0, translate=0.1, scales=(0.75, 1.25), shear=0.0,
                                    target_size=(imgsz, imgsz), filter_box_candidates=True,
                                    wh_thr=2, area_thr=0.1, ar_thr=20),
            T.DetectionHSV(prob=0.5, hgain=18, sgain=30, vgain=30),
            T.DetectionHorizontalFlip(prob=0.5),
        ]
    tf += [
        T.DetectionPaddedRescale(input_dim=(imgsz, imgsz), pad_value=114),
        T.DetectionStandardize(max_value=255.0),
        T.DetectionTargetsFormatTransform(input_dim=(imgsz, imgsz), output_format=LABEL_CXCYWH),
    ]
    return SortedYoloDataset(
        data_dir=common, images_dir=os.path.relpath(img_dir, common), labels_dir=os.path.relpath(lbl_dir, common),
        classes=list(names), input_dim=(imgsz, imgsz), transforms=tf, ignore_empty_annotations=False,
        cache_annotations=True, verbose=False,
    )


def make_loader(dataset, batch: int, shuffle: bool, generator):
    import torch
    from super_gradients.training.utils.collate_fn.detection_collate_fn import DetectionCollateFN

    drop_last = shuffle and len(dataset) > batch and len(dataset) % batch == 1  # no 1-image BN batch
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch, shuffle=shuffle, num_workers=0, drop_last=drop_last,
        collate_fn=DetectionCollateFN(), generator=generator,
    )


def param_groups(model, weight_decay: float):
    """No weight decay on biases and norm layers (super-gradients' zero_weight_decay_on_bias_and_bn)."""
    import torch

    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if name == "bias" or isinstance(module, torch.nn.modules.batchnorm._NormBase) or p.ndim <= 1:
                no_decay.append(p)
            else:
                decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_lambda(total_steps: int, warmup_steps: int, warmup_ratio: float, lrf: float):
    def f(step: int) -> float:
        if step < warmup_steps:
            return warmup_ratio + (1.0 - warmup_ratio) * step / warmup_steps
        span = max(1, total_steps - warmup_steps)
        t = min(1.0, (step - warmup_steps) / span)
        return lrf + (1.0 - lrf) * 0.5 * (1.0 + math.cos(math.pi * t))
    return f


class EMA:
    """Exponential moving average of weights and buffers, threshold decay as super-gradients'."""

    def __init__(self, model, decay: float):
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)
        self.decay = decay
        self.updates = 0

    def update(self, model) -> None:
        import torch

        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            msd = model.state_dict()
            for k, v in self.module.state_dict().items():
                if v.dtype.is_floating_point:
                    v.mul_(d).add_(msd[k].detach(), alpha=1 - d)
                else:
                    v.copy_(msd[k])


# ---------------------------------------------------------------- RNG state as plain types
def rng_state(loader_gen) -> dict:
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": torch.get_rng_state(),
        "loader": loader_gen.get_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
    }


def set_rng_state(state: dict, loader_gen) -> None:
    import numpy as np
    import torch

    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    loader_gen.set_state(state["loader"])
    if state.get("cuda"):
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------- evaluation
def evaluate_model(model, loader, names, req, device: str = "cpu") -> dict:
    import torch
    from super_gradients.training.metrics.detection_metrics import DetectionMetrics
    from super_gradients.training.models.detection_models.pp_yolo_e import PPYoloEPostPredictionCallback
    from super_gradients.training.utils.detection_utils import IouThreshold

    def callback():
        return PPYoloEPostPredictionCallback(score_threshold=float(req["conf"]), nms_threshold=float(req["iou"]),
                                             nms_top_k=1000, max_predictions=int(req["max_det"]))

    nc = len(names)
    m50 = DetectionMetrics(nc, callback(), normalize_targets=True, iou_thres=0.5, top_k_predictions=int(req["max_det"]))
    m5095 = DetectionMetrics(nc, callback(), normalize_targets=True, iou_thres=IouThreshold.MAP_05_TO_095,
                             top_k_predictions=int(req["max_det"]))
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for images, targets in loader:
            images, targets = images.to(device), targets.to(device)
            preds = model(images)
            m50.update(preds, targets, device=device, inputs=images)
            m5095.update(preds, targets, device=device, inputs=images)
    r50, r5095 = m50.compute(), m5095.compute()
    model.train(was_training)
    out = {"mAP50": float(r50["mAP@0.50"]), "mAP50-95": float(r5095["mAP@0.50:0.95"]),
           "precision50": float(r50["Precision@0.50"]), "recall50": float(r50["Recall@0.50"]),
           "f1_50": float(r50["F1@0.50"])}
    out["fitness"] = 0.1 * out["mAP50"] + 0.9 * out["mAP50-95"]
    return out


# ---------------------------------------------------------------- checkpoints
def save_checkpoint(path: str, payload: dict) -> None:
    import torch

    tmp = path + ".tmp"
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str) -> dict:
    import torch

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    marker = ckpt.get("yoloq") if isinstance(ckpt, dict) else None
    if not isinstance(marker, dict) or marker.get("engine") != "yolo-nas":
        raise RequestError(f"{path} was not written by the yolo-nas runner")
    if marker.get("format", 0) > FORMAT:
        raise RequestError(f"{path} has checkpoint format {marker.get('format')} (this runner reads {FORMAT})")
    return ckpt


# ---------------------------------------------------------------- train
def train(req: dict) -> int:
    import torch

    if not req.get("data") or not req.get("workdir"):
        raise RequestError("training needs data and workdir")
    workdir = os.path.abspath(req["workdir"])
    os.makedirs(workdir, exist_ok=True)
    stop_file = req["stop_file"] or os.path.join(workdir, "STOP")
    data = parse_data(req["data"])
    names = data["names"]
    resume = load_checkpoint(req["resume_from"]) if req["resume_from"] else None
    if resume is not None:
        hyp = resume["hyp"]
        changed = {k: (hyp.get(k), req[k]) for k in HYP_KEYS if hyp.get(k) != req[k]}
        if changed:
            raise RequestError(f"resume_from was trained with other settings: {changed}")
        if list(resume["names"]) != names:
            raise RequestError("resume_from has other class names than the data")
        done = int(resume["epoch"])
        if done >= req["epochs"]:
            raise RequestError(f"resume_from has already done {done}/{req['epochs']} epochs")
        if req["stop_after_epoch"] <= done:
            raise RequestError(f"stop_after_epoch {req['stop_after_epoch']} <= epochs done {done}")
    else:
        done = 0

    import super_gradients
    from super_gradients.training.losses import PPYoloELoss

    determinism(req)
    device = str(req["device"])
    if device == "cuda" and not torch.cuda.is_available():
        raise RequestError("device cuda asked for, but torch sees no GPU here")
    model = build_model(req["arch"], len(names)).to(device)
    model.train()
    criterion = PPYoloELoss(num_classes=len(names), use_static_assigner=False)
    ema = EMA(model, float(req["ema_decay"])) if req["ema"] else None
    groups = param_groups(model, float(req["weight_decay"]))
    if req["optimizer"] == "AdamW":
        opt = torch.optim.AdamW(groups, lr=float(req["lr0"]))
    else:
        opt = torch.optim.SGD(groups, lr=float(req["lr0"]), momentum=float(req["momentum"]), nesterov=True)

    loader_gen = torch.Generator()
    loader_gen.manual_seed(int(req["seed"]))
    train_ds = make_dataset(data["train"], names, int(req["imgsz"]), True, bool(req["augment"]))
    train_loader = make_loader(train_ds, int(req["batch"]), True, loader_gen)
    val_loader = None
    if req["val"] and data.get("val"):
        val_ds = make_dataset(data["val"], names, int(req["imgsz"]), False, False)
        val_loader = make_loader(val_ds, int(req["batch"]), False, torch.Generator().manual_seed(0))
    steps = len(train_loader)
    warmup_steps = int(round(float(req["warmup_epochs"]) * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(req["epochs"] * steps, warmup_steps, float(req["warmup_bias_ratio"]), float(req["lrf"])))
    best_fitness = None
    if resume is None and req["weights"]:
        start = load_checkpoint(req["weights"])
        if start["yoloq"]["arch"] != req["arch"] or list(start["names"]) != names:
            raise RequestError(f"weights {req['weights']} are a {start['yoloq']['arch']} of classes {start['names']}; "
                               f"this job trains a {req['arch']} of classes {names}")
        model.load_state_dict(start["ema_net"] if start.get("ema_net") is not None else start["net"])
        if ema is not None:
            ema.module.load_state_dict(model.state_dict())
    if resume is not None:
        model.load_state_dict(resume["net"])
        if ema is not None:
            ema.module.load_state_dict(resume["ema_net"])
            ema.updates = int(resume["ema_updates"])
        opt.load_state_dict(resume["optimizer_state_dict"])
        sched.load_state_dict(resume["scheduler_state_dict"])
        set_rng_state(resume["rng"], loader_gen)
        best_fitness = resume.get("best_fitness")
    best_path = os.path.join(workdir, "best.pt")
    best = best_path if best_fitness is not None and os.path.exists(best_path) else None

    emit("start", epoch=done, stop_after_epoch=req["stop_after_epoch"], epochs=req["epochs"], arch=req["arch"],
         train_images=len(train_ds), steps_per_epoch=steps, super_gradients=str(super_gradients.__version__),
         torch=str(torch.__version__), threads=torch.get_num_threads())
    epoch = done
    while epoch < req["stop_after_epoch"]:
        t0 = time.time()
        model.train()
        sums = None
        for images, targets in train_loader:
            images, targets = images.to(device), targets.to(device)
            out = model(images)
            loss, parts = criterion(out, targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if ema is not None:
                ema.update(model)
            sums = parts.detach() if sums is None else sums + parts.detach()
        epoch += 1
        train_s = time.time() - t0
        metrics = {f"train/{n}": float(v) / steps for n, v in zip(criterion.component_names, sums)}
        metrics["lr"] = float(opt.param_groups[0]["lr"])
        metrics["train_seconds"] = train_s
        if val_loader is not None:
            v = evaluate_model(ema.module if ema is not None else model, val_loader, names, req, device)
            metrics.update({f"val/{k}": x for k, x in v.items()})
        fitness = metrics.get("val/fitness")
        improved = fitness is not None and (best_fitness is None or fitness > best_fitness)
        if improved:
            best_fitness = fitness
        path = os.path.join(workdir, f"epoch-{epoch}.pt")
        save_checkpoint(path, {
            "net": model.state_dict(),
            "ema_net": ema.module.state_dict() if ema is not None else None,
            "ema_updates": ema.updates if ema is not None else 0,
            "optimizer_state_dict": opt.state_dict(),
            "scheduler_state_dict": sched.state_dict(),
            "rng": rng_state(loader_gen),
            "epoch": epoch,
            "epochs": req["epochs"],
            "metrics": metrics,
            "best_fitness": best_fitness,
            "hyp": {k: req[k] for k in HYP_KEYS},
            "names": names,
            "yoloq": {"engine": "yolo-nas", "arch": req["arch"], "resumable": epoch < req["epochs"],
                      "format": FORMAT, "nc": len(names), "epoch": epoch, "epochs": req["epochs"],
                      "imgsz": int(req["imgsz"]), "super_gradients": str(super_gradients.__version__),
                      "torch": str(torch.__version__)},
        })
        if improved:
            shutil.copyfile(path, best_path + ".tmp")
            os.replace(best_path + ".tmp", best_path)
            best = best_path
        emit("epoch_end", epoch=epoch, metrics=metrics, checkpoint=path, seconds=time.time() - t0)
        if req["keep_checkpoints"]:  # epoch-{n}.pt older than the last K of this segment go (best.pt stays)
            for old in range(done + 1, epoch - int(req["keep_checkpoints"]) + 1):
                stale = os.path.join(workdir, f"epoch-{old}.pt")
                if os.path.exists(stale):
                    os.remove(stale)
        if epoch < req["stop_after_epoch"] and (os.path.exists(stop_file) or _told_to_stop(req)):
            emit("stopped", epoch=epoch)
            break
    emit("done", epochs_done=epoch, finished=epoch >= req["epochs"], best=best)
    return 0


def _told_to_stop(req: dict) -> bool:
    """With `handshake`, the parent's answer after an epoch: "stop" or "go" (EOF: stop)."""
    if not req["handshake"]:
        return False
    answer = sys.stdin.readline().strip()
    return answer != "go"


# ---------------------------------------------------------------- evaluate / export
def _model_from_checkpoint(path: str, use_ema: bool = True):
    ckpt = load_checkpoint(path)
    model = build_model(ckpt["yoloq"]["arch"], int(ckpt["yoloq"]["nc"]))
    weights = ckpt["ema_net"] if use_ema and ckpt.get("ema_net") is not None else ckpt["net"]
    model.load_state_dict(weights)
    return model.eval(), ckpt


def evaluate(req: dict) -> int:
    import torch

    if not req.get("checkpoint") or not req.get("data"):
        raise RequestError("evaluate needs checkpoint and data")
    _import_sg()
    determinism(req)
    model, ckpt = _model_from_checkpoint(req["checkpoint"])
    data = parse_data(req["data"])
    split = str(req["split"])
    if split not in ("val", "test") or not data.get(split):
        raise RequestError(f"the data has no {split} split")
    imgsz = int(req.get("imgsz") or ckpt["yoloq"]["imgsz"])
    ds = make_dataset(data[split], data["names"], imgsz, False, False)
    t0 = time.time()
    metrics = evaluate_model(model, make_loader(ds, int(req["batch"]), False, torch.Generator()), data["names"], req)
    emit("evaluate", checkpoint=os.path.abspath(req["checkpoint"]), split=split, images=len(ds), metrics=metrics,
         seconds=time.time() - t0)
    return 0


def export(req: dict, output: str | None) -> int:
    """Each of `formats` from a checkpoint (EMA weights, QARepVGG blocks fused), verified by
    loading the file back and running one image: the largest difference to torch is reported
    and above 1e-3 (scores) or 1e-3 x imgsz (boxes, pixels) the export fails."""
    import numpy as np
    import torch

    if not req.get("checkpoint"):
        raise RequestError("export needs --checkpoint")
    _import_sg()
    model, ckpt = _model_from_checkpoint(req["checkpoint"])
    imgsz = int(req.get("imgsz") or ckpt["yoloq"]["imgsz"])
    stem = os.path.splitext(output or req["checkpoint"])[0]
    image = None
    if req.get("data"):
        data = parse_data(req["data"])
        split = data.get("val") or data["train"]
        ds = make_dataset(split, data["names"], imgsz, False, False)
        image = torch.as_tensor(np.asarray(ds[0][0]))[None].float()
    if image is None:
        image = torch.rand(1, 3, imgsz, imgsz, generator=torch.Generator().manual_seed(0))
    model.prep_model_for_conversion(input_size=(1, 3, imgsz, imgsz))
    with torch.no_grad():
        ref = model(image)
    ref_boxes, ref_scores = ref[0] if isinstance(ref, tuple) and isinstance(ref[0], tuple) else ref
    ok = True
    for fmt in req["formats"]:
        t0 = time.time()
        if fmt == "onnx":
            path = stem + ".onnx"
            torch.onnx.export(model, (image,), path, opset_version=17, dynamo=False, input_names=["images"],
                              output_names=["boxes", "scores"], do_constant_folding=True)
            import onnxruntime as ort

            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            boxes, scores = sess.run(None, {"images": image.numpy()})
            verified_by = f"onnxruntime {ort.__version__}"
        else:
            path = stem + ".torchscript"
            with torch.no_grad():
                traced = torch.jit.trace(_Flat(model).eval(), image, check_trace=False)
            traced.save(path)
            with torch.no_grad():
                boxes, scores = (t.numpy() for t in torch.jit.load(path)(image))
            verified_by = f"torch.jit.load {torch.__version__}"
        box_diff = float(np.abs(boxes - ref_boxes.numpy()).max())
        score_diff = float(np.abs(scores - ref_scores.numpy()).max())
        good = score_diff < 1e-3 and box_diff < 1e-3 * imgsz
        ok = ok and good
        emit("export", format=fmt, checkpoint=os.path.abspath(req["checkpoint"]), path=os.path.abspath(path),
             bytes=os.path.getsize(path), imgsz=imgsz, verified_by=verified_by, verified=good,
             outputs={"boxes": list(boxes.shape), "scores": list(scores.shape)},
             max_abs_diff_vs_torch={"boxes_px": box_diff, "scores": score_diff}, seconds=time.time() - t0,
             top_score=float(scores.max()))
    return 0 if ok else 1


def _Flat(model):
    """`model` whose forward returns (boxes, scores), a module torch.jit.trace can hold."""
    import torch

    class Flat(torch.nn.Module):
        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return tuple(_flat_outputs(self.inner(x)))

    for p in model.parameters():
        p.requires_grad_(False)
    return Flat(model)


def _flat_outputs(out):
    """(boxes, scores) of a fused YOLO-NAS forward, whichever nesting super-gradients returns."""
    return out[0] if isinstance(out, tuple) and isinstance(out[0], tuple) else out


def main(argv=None) -> int:
    _take_stdout()
    ap = argparse.ArgumentParser(description="YOLO-NAS segment runner (super-gradients)")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--evaluate", action="store_true", help="mAP50 / mAP50-95 of a checkpoint on val")
    mode.add_argument("--export", action="store_true", help="ONNX from a checkpoint, checked with onnxruntime")
    ap.add_argument("--request", help="request JSON file")
    ap.add_argument("--checkpoint")
    ap.add_argument("--data")
    ap.add_argument("--imgsz", type=int)
    ap.add_argument("--output", help="export: the file stem (default: the checkpoint's)")
    args = ap.parse_args(argv)
    try:
        req = load_request(args.request, {"checkpoint": args.checkpoint, "data": args.data, "imgsz": args.imgsz})
        if (args.export or args.evaluate) and "imgsz" not in req["_given"]:
            req["imgsz"] = None  # the checkpoint's
        where = req.get("workdir") or os.path.dirname(os.path.abspath(req.get("checkpoint") or "."))
        _offline_env(where)
        if not req["allow_network"]:
            _guard_network()
        if args.export:
            return export(req, args.output)
        if args.evaluate:
            return evaluate(req)
        return train(req)
    except RequestError as exc:
        emit("error", message=str(exc))
        return 2
    except Exception as exc:  # noqa: BLE001  (one JSON line for the parent, traceback on stderr)
        import traceback

        traceback.print_exc()
        emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
