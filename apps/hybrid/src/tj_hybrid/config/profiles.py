"""Profiles: the seeds' test / normal / maximum / memory- and VRAM-optimised configurations.

Each is an overlay file ``configs/profiles/<name>.yaml`` naming only what it changes. Without
``--profile`` the trainer picks one for the hardware it finds and says why.
"""

from __future__ import annotations

__all__ = ["PROFILES", "auto_profile", "describe_profile"]

PROFILES: dict[str, str] = {
    "smoke": "CPU-only or a quick check: tiny model, 2 gloo ranks, minutes",
    "cpu": "a real agent without a GPU: smoke's budgets, a 200 m view and a look-ahead teacher; "
    "--phase all takes about 15 min on 2 cores on the 1-light embedded net, longer with more lights "
    "(the teacher looks ahead per light: its scoring and demonstrations alone took 42 min on the "
    "4-light arterial)",
    "normal": "a GPU workstation (the reference 2x RTX 2080 Ti, 16 GB RAM)",
    "max": "maximum throughput when RAM and VRAM allow: bigger batches, more workers",
    "low_memory": "tight host RAM: small budget, few workers, int8 features, chunk cache",
    "low_vram": "small GPUs: small micro-batches, more accumulation, activation checkpointing",
}


def auto_profile() -> tuple[str, str]:
    """(profile, reason) for this machine: GPUs -> normal, none -> smoke."""
    import torch

    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        return "normal", f"found {n} CUDA device{'s' if n != 1 else ''}"
    return "smoke", "no CUDA device found"


def describe_profile(profile: str, reason: str) -> str:
    """The line a run starts with: the profile, why it was chosen, what it is for and how long
    it takes (a CPU-only user learns before the start what ``cpu`` will cost them)."""
    what = PROFILES.get(profile)
    return f"profile {profile} ({reason})" + (f": {what}" if what else "")
