"""The segment contract (`yoloq.domain.contract`): the plan's wire form and versions, the one
definition of "preempted", and that no other product module spells a label, tag or event name
(pure; the same count on every surface of a real preemption is test_preemption_count_stack.py)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import yaml

from yoloq.domain import contract
from yoloq.domain.contract import PlanError, SegmentPlan

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("yoloq", "flows", "blocks", "work_pools", "bench")  # the shipped code and its benches
CONTRACT_FILE = ROOT / "yoloq" / "domain" / "contract.py"
# A whole string (or an f-string's literal part) that is a yoloq label, tag, MLflow tag, event
# or resource name: `yoloq.<name>[.<name>...]` (a trailing dot: an f-string's prefix), or a
# run tag's `job:` / `team:` / `tier:` prefix.
LABEL_LIKE = re.compile(r"^(yoloq\.[a-z_][a-z0-9_]*(\.[a-z_*][a-z0-9_]*)*\.?|(job|team|tier):[\w.-]*)$")


def _state(name: str, kind: str) -> NS:
    return NS(name=name, is_crashed=lambda: kind == "CRASHED", is_completed=lambda: kind == "COMPLETED",
              is_final=lambda: kind != "RUNNING")


def run(name: str, kind: str, labels: dict | None = None, plan: dict | None = None, target: int = 4) -> NS:
    return NS(state=_state(name, kind), labels=labels or {},
              parameters={"plan": plan or {}, "stop_after_epoch": target})


REQUESTED = {contract.PREEMPT_LABEL: contract.PREEMPT_REQUESTED, contract.PREEMPTED_BY_LABEL: "urgent-1"}


@pytest.mark.parametrize(("segment", "preempted", "final"), [
    pytest.param(run("Preempted", "CANCELLED", REQUESTED), True, "Preempted", id="stopped at a boundary"),
    pytest.param(run("Crashed", "CRASHED", REQUESTED), True, "Preempted", id="killed after its grace"),
    pytest.param(run("Crashed", "CRASHED"), False, "Crashed", id="crashed, never asked"),
    pytest.param(run("Completed", "COMPLETED", REQUESTED), False, "Completed", id="asked, finished anyway"),
    pytest.param(run("Cancelled", "CANCELLED", REQUESTED), False, "Cancelled", id="asked, then cancelled"),
    pytest.param(run("Running", "RUNNING", REQUESTED), False, None, id="still stopping"),
    pytest.param(NS(state=None, labels=REQUESTED, parameters={}), False, None, id="no state yet"),
])
def test_one_definition_of_preempted(segment, preempted, final):
    assert contract.was_preempted(segment) is preempted
    assert contract.final_state(segment) == final


def test_preemption_count_counts_both_kinds_of_victim():
    runs = [run("Preempted", "CANCELLED", REQUESTED), run("Crashed", "CRASHED", REQUESTED),
            run("Crashed", "CRASHED"), run("Completed", "COMPLETED")]
    assert contract.preemption_count(runs) == 2
    assert contract.preempted_by(runs[1]) == "urgent-1" and contract.preempted_by(runs[2]) == "?"


def test_progress_epoch_reads_the_label_then_the_target_then_the_plan():
    labelled = run("Running", "RUNNING", {contract.EPOCH_LABEL: "3"}, {"epochs_done": 2})
    assert contract.progress_epoch(labelled) == 3
    assert contract.progress_epoch(run("Completed", "COMPLETED", plan={"epochs_done": 2}, target=4)) == 4
    assert contract.progress_epoch(run("Crashed", "CRASHED", plan={"epochs_done": 2})) == 2
    assert contract.start_epoch(run("Crashed", "CRASHED", plan={"epochs_done": 2})) == 2


V1_PLAN = {"team": "vision", "tier": "low", "job_class": "full", "est_mem_gb": 60, "est_epoch_s": 100,
           "epochs": 4, "epochs_done": 2, "submitted_at": 1.5, "batch": 8, "fixed_mem_gb": 1.0,
           "mem_per_image_gb": 0.1}


def test_a_plan_without_a_version_is_version_1_and_round_trips():
    plan = SegmentPlan.from_dict(V1_PLAN)  # as runs already in a database carry it
    assert plan.version == 1 and plan.est_mem_gb == 60.0 and isinstance(plan.est_mem_gb, float)
    wire = plan.to_dict()
    assert wire["version"] == 1 and {k: wire[k] for k in V1_PLAN} == V1_PLAN
    assert SegmentPlan.from_dict(json.loads(json.dumps(wire))) == plan
    assert SegmentPlan.from_dict({}) == SegmentPlan()  # a segment queued without a plan
    assert "submitted_at" not in SegmentPlan().to_dict()  # unset optional fields are left out


@pytest.mark.parametrize("version", [2, 0, "1", None, True])
def test_an_unknown_plan_version_is_refused_in_one_line(version):
    with pytest.raises(PlanError) as err:
        SegmentPlan.from_dict({**V1_PLAN, "version": version})
    message = str(err.value)
    assert "\n" not in message and message.startswith("plan.version: got ")
    assert repr(version) in message and "version 1" in message


def test_a_bad_plan_field_is_named():
    with pytest.raises(PlanError, match=r"^plan\.epochs_done: 'two' is not of type int$"):
        SegmentPlan.from_dict({"epochs_done": "two"})
    with pytest.raises(PlanError, match="expected a mapping"):
        SegmentPlan.from_dict(["epochs_done"])


def test_the_plan_is_frozen():
    plan = SegmentPlan(team="vision")
    with pytest.raises(AttributeError):
        plan.team = "audio"  # type: ignore[misc]
    assert plan.with_changes(throttle_batch=4).throttle_batch == 4 and plan.throttle_batch == 0


def test_run_tags_keep_their_spelling():
    assert contract.run_tags("j-1", "vision", "low", "extra") == ["job:j-1", "team:vision", "tier:low",
                                                                  "yoloq", "extra"]


def test_prefect_yaml_spells_the_dataset_trigger_as_the_contract_does():
    """prefect.yaml cannot import the contract: its retrain trigger must match it."""
    deployments = {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}
    [trigger] = deployments["retrain-on-dataset-update"]["triggers"]
    assert trigger["expect"] == [contract.DATASET_UPDATED_EVENT]
    assert trigger["match"]["prefect.resource.id"] == contract.dataset_resource_id("*")
    assert contract.RESOURCE_DATASET_PATH in trigger["parameters"]["dataset"]


def _is_module_path(text: str) -> bool:
    """`yoloq.ops.server`: an import path (python -m, importlib), not a label."""
    path = ROOT.joinpath(*text.rstrip(".").split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _logger_names(tree: ast.AST) -> set[int]:
    """ids of the string nodes passed to `logging.getLogger(...)` (logger names, not labels)."""
    found = set()
    for node in ast.walk(tree):
        called = getattr(node.func, "attr", getattr(node.func, "id", "")) if isinstance(node, ast.Call) else ""
        if called == "getLogger":
            found.update(id(arg) for arg in node.args)
    return found


def label_literals(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    loggers = _logger_names(tree)
    hits = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in loggers
                and LABEL_LIKE.match(node.value) and not _is_module_path(node.value)):
            hits.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return hits


def test_the_scan_sees_labels_tags_and_events():
    """The scan below can fail: it finds each kind of literal it forbids."""
    source = ('x = {"yoloq.preempt": "requested"}\nt = f"job:{j}"\ne = f"yoloq.job.{kind}"\n'
              'import logging\nlog = logging.getLogger("yoloq.worker")\nm = "yoloq.ops.server"\n')
    probe = ROOT / "tests" / "_contract_probe.py"
    probe.write_text(source)
    try:
        hits = label_literals(probe)
    finally:
        probe.unlink()
    assert [h.split(": ", 1)[1] for h in hits] == ["'yoloq.preempt'", "'job:'", "'yoloq.job.'"]


def test_no_label_tag_or_event_literal_outside_the_contract():
    hits = [hit for package in PRODUCT for path in sorted((ROOT / package).rglob("*.py"))
            if path != CONTRACT_FILE for hit in label_literals(path)]
    assert not hits, "use the constants of yoloq/domain/contract.py:\n" + "\n".join(hits)
