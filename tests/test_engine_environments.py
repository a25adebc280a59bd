"""Engine environments: what is linked from the main environment instead of installed twice,
and an install whose links no longer resolve is not taken for a working one."""

from __future__ import annotations

from importlib import metadata

from yoloq.engine import environments
from yoloq.engine.environments import MARKER, SHARED, YOLO_NAS, _pins, torch_closure


def test_the_torch_closure_holds_torch_its_cuda_libraries_and_numpy():
    closure = torch_closure()
    assert {"torch", "torchvision", "numpy", "pillow"} <= set(closure)
    assert closure["torch"].version == metadata.version("torch")
    # nothing the main environment lacks is listed (a platform-only requirement is skipped)
    assert all(dist.version for dist in closure.values())


def test_uv_pins_are_parsed_by_normalised_name():
    assert _pins("Typing_Extensions==4.12.2\nsuper.gradients[extra]==3.7.1\nnvidia-cuda-runtime==13.0.96; sys_platform == 'linux'\n") == {
        "typing-extensions": "4.12.2", "super-gradients": "3.7.1", "nvidia-cuda-runtime": "13.0.96"}
    assert _pins("numpy==1.23.5\n# comment\nPillow==11.0.0 ; python_version >= '3.8'\n") == {
        "numpy": "1.23.5", "pillow": "11.0.0"}


def test_an_install_whose_linked_torch_is_gone_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(environments, "engines_dir", lambda: tmp_path)
    root = tmp_path / YOLO_NAS.name
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / MARKER).write_text(YOLO_NAS.fingerprint() + "\n")
    shared = root / SHARED
    shared.mkdir()
    target = tmp_path / "main-site" / "torch"
    target.mkdir(parents=True)
    (shared / "torch").symlink_to(target)
    assert YOLO_NAS.installed()
    target.rmdir()  # the main environment was moved or recreated elsewhere
    assert not YOLO_NAS.installed()


def test_a_marker_from_another_torch_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(environments, "engines_dir", lambda: tmp_path)
    root = tmp_path / YOLO_NAS.name
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("")
    (root / SHARED).mkdir()
    (root / MARKER).write_text("0123456789abcdef\n")
    assert not YOLO_NAS.installed()
