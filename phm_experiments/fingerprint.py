"""The checkpoints of a run belong to the config that trained them.

Before fairseq-train starts, phm-run writes ``checkpoints/fingerprint.json``: every config value
that changes the trained model (data, prepare, seed, train options, the teacher's fingerprint,
distill, init) and its hash. Evaluation-only keys (evaluate, description, paper, count_module)
are not in it: editing them re-evaluates the trained model. A run whose checkpoints carry
another fingerprint is refused with what changed; phm-run --force starts it clean.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

FILE = "fingerprint.json"
TRAINING_KEYS = ("data", "prepare", "seed", "train", "distill", "init")


@dataclass(frozen=True)
class Fingerprint:
    values: dict

    @classmethod
    def of(cls, config, teacher: "Fingerprint" = None) -> "Fingerprint":
        values = {key: config.values.get(key) for key in TRAINING_KEYS}
        values["teacher"] = teacher.sha256 if teacher else None
        return cls(values)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()

    def write(self, checkpoints: Path, config_path) -> None:
        checkpoints.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"sha256": self.sha256, "config": str(config_path), "values": self.values}, indent=2)
        (checkpoints / FILE).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def read(cls, checkpoints: Path):
        """The fingerprint of the checkpoints in this folder; None where phm-run wrote none."""
        try:
            return cls(json.loads((checkpoints / FILE).read_text(encoding="utf-8"))["values"])
        except FileNotFoundError:
            return None

    def changes(self, new: "Fingerprint") -> list:
        """What differs, one "key: old -> new" line per value (dotted keys for options)."""
        return differences(self.values, new.values)


def differences(old: dict, new: dict) -> list:
    """What differs between two configs' values, one "key: old -> new" line per value (dotted keys)."""
    old, now = _flat(old), _flat(new)
    lines = []
    for key in sorted(set(old) | set(now)):
        if old.get(key, _UNSET) != now.get(key, _UNSET):
            lines.append(f"{key}: {_show(old.get(key, _UNSET))} -> {_show(now.get(key, _UNSET))}")
    return lines


_UNSET = object()


def _show(value) -> str:
    return "(not set)" if value is _UNSET else json.dumps(value) if not isinstance(value, str) else value


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        elif value is not None:
            flat[f"{prefix}{key}"] = value
    return flat
