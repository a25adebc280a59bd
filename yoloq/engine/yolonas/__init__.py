"""The YOLO-NAS engine: super-gradients 3.7.1 in its own virtual environment.

super-gradients pins numpy<=1.23, protobuf==3.20.3 and onnx==1.15.0, which cannot share an
environment with ultralytics, so `yoloq engine install yolo-nas` builds one
(`yoloq.engine.environments`) and every segment, evaluation and export runs `runner.py`
with that environment's Python as a child process, talking through one JSON line per event
(`segment` for training, `finalise` for evaluate and export). `runner.py` imports nothing
of yoloq (standard library, torch and super-gradients only).

Checkpoints (`epoch-{n}.pt`) hold plain state_dicts and plain types (any torch reads them
with `weights_only=True`) and a `yoloq` marker naming the engine, by which
`yoloq.analysis.fingerprint` binds them to it.
"""

RUNNER = __file__.rsplit("/", 1)[0] + "/runner.py"
