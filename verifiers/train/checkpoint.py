"""Checkpoints for exact resume: trainer (model, optimizer, scheduler, step), orchestrator (data
position, mixer, reschedule queue, versions) and every RNG, written atomically to
``<run>/checkpoints/step_<n>/``."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import torch


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    try:
        import numpy as np

        state["numpy"] = np.random.get_state()
    except ImportError:
        pass
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "numpy" in state:
        import numpy as np

        np.random.set_state(state["numpy"])


def save_checkpoint(run_dir: str | Path, step: int, trainer_state: dict[str, Any],
                    orchestrator_state: dict[str, Any] | None, extra: dict[str, Any] | None = None) -> Path:
    root = Path(run_dir) / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f".step_{step}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    torch.save(trainer_state, tmp / "trainer.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    (tmp / "orchestrator.json").write_text(json.dumps(orchestrator_state or {}, default=list))
    (tmp / "meta.json").write_text(json.dumps({"step": step, **(extra or {})}))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)  # atomic: a checkpoint folder either is complete or does not exist
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = [(int(p.name.split("_", 1)[1]), p) for p in root.glob("step_*") if p.is_dir()
             and p.name.split("_", 1)[1].isdigit() and (p / "meta.json").exists()]
    return max(steps)[1] if steps else None


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    return {
        "trainer": torch.load(p / "trainer.pt", weights_only=False),
        "rng": torch.load(p / "rng.pt", weights_only=False),
        "orchestrator": json.loads((p / "orchestrator.json").read_text()),
        "meta": json.loads((p / "meta.json").read_text()),
    }
