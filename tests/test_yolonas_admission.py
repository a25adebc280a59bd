"""Admitting a YOLO-NAS job: analysed like any detection job, its train_args checked against
what its engine takes, and refused in one line, naming the install command, on a host
without the engine's environment. No training, no server."""

from __future__ import annotations

import pytest

from yoloq import cli
from yoloq.domain.spec import JobSpec


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from yoloq.datasets.synth import synth_dataset

    return synth_dataset(tmp_path_factory.mktemp("nas-admit"), train=4, val=2, imgsz=64, seed=0)


def spec(data, **train_args) -> JobSpec:
    return JobSpec(name="nas", team="vision", model="yolo_nas_s", data=str(data), epochs=3, imgsz=64, batch=4,
                   train_args=train_args)


def test_analyse_reports_the_yolonas_model(data):
    from yoloq.analysis import analyse

    analysis = analyse(spec(data, lr0=0.001, optimizer="SGD"))
    assert (analysis.family, analysis.scale, analysis.task, analysis.params_m) == ("yolo-nas", "s", "detect", 19.05)
    assert analysis.exact_resume and analysis.accumulate == 1 and analysis.nc == 3


@pytest.mark.parametrize("args, field", [({"mosaic": 0.5}, "train_args.mosaic"),
                                         ({"optimizer": "Adam"}, "train_args.optimizer")])
def test_a_train_arg_the_engine_does_not_take_is_refused(data, args, field):
    from yoloq.analysis import analyse
    from yoloq.base.errors import UserError

    with pytest.raises(UserError) as caught:
        analyse(spec(data, **args))
    assert caught.value.field == field and "\n" not in caught.value.line()


def test_without_the_engine_admission_refuses_naming_the_install_command(data, tmp_path, monkeypatch):
    from yoloq.service.admission import admit

    monkeypatch.setenv("YOLOQ_ENGINES_DIR", str(tmp_path / "no-engines"))  # settings() sees it changed
    verdict = admit(spec(data), None, None)
    assert verdict.refusal is not None
    line = verdict.refusal.line()
    assert line.startswith("model: the yolo-nas engine is not installed on this host")
    assert "yoloq engine install yolo-nas" in line


def test_engine_list_says_where_and_whether(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.setenv("YOLOQ_ENGINES_DIR", str(tmp_path))
    assert cli.main(["engine", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows["yolo-nas"] == {"installed": False, "path": str(tmp_path / "yolo-nas"), "why": rows["yolo-nas"]["why"]}
    assert "numpy<=1.23" in rows["yolo-nas"]["why"]
