"""Predicted run time of a candidate program, learned from the times the search measures.

The e-graph's static cost (rewrites/cost.py) ranks programs inside the e-graph, before they are
lowered; it cannot see which intermediates the lowering materializes. This model ranks the
candidates the search will build and time: the backend counts what it would run
(`backend.features(graph)`: bytes moved, product and other arithmetic, launches;
ir/kernel_cost.py), on the kernel IR or on its own plan.

A program's prediction is a weighted sum: seconds = sum_j coefficient_j * feature_j. Each
target starts from roofline defaults; every search appends (features, best measured time of the
program) to a per-device file in the cache and refits a scale per coefficient (ridge regression
towards the defaults, relative error), so the ranking adapts to the machine. A trial's
prediction is its program's times a factor for its schedule: the geometric mean, over the
programs this device has timed under that schedule and under their first (default) one, of
the ratio of the two times (one thread, a strict order, a vector width: what a count of the
program cannot see), with the backend's own prediction of that ratio as one more measurement
(`backend.schedule_factor`: kernels counted one by one under the schedule), so a device that
has measured nothing yet still tells one thread from all cores. The search orders its trials by
the prediction and reports the rank correlation between predicted and measured times.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from dataclasses import dataclass, field

import numpy as np

from ir.graph import Graph
from ir.kernel_cost import FEATURES

# seconds per unit of each feature, before any measurement on this machine
# (FEATURES: bytes, mm_half, mm_f32, scalar, kernels, strided, loops)
DEFAULTS = {
    "cuda": (1 / 3.5e12, 1 / 4e14, 1 / 4e13, 1 / 2e13, 5e-6, 1 / 1e12, 1e-12),
    "cpu": (1 / 1.5e10, 1 / 1e11, 1 / 1e11, 1 / 2e10, 3e-6, 1 / 5e9, 5e-9),
}
MAX_OBSERVATIONS = 400  # per device, newest kept
RIDGE = 0.05            # pull of the defaults against few measurements
MAX_SCHEDULES = 400     # schedule factors kept per device (by name, and by name and size)
SIZED_MIN = 2           # measurements a schedule's factor at one size needs before it is used


def _decade(seconds) -> int | None:
    """The power of ten of a predicted time (None: unknown)."""
    return math.floor(math.log10(seconds)) if seconds is not None and 0 < seconds < math.inf else None


def features(graph: Graph, backend) -> tuple[float, ...] | None:
    """What `backend` would run for `graph`, counted; None when it cannot say (an error in a
    candidate that does not lower is the build's to report, not the ranking's)."""
    fn = getattr(backend, "features", None)
    if not callable(fn):
        return None
    try:
        feats = tuple(float(x) for x in fn(graph))
    except Exception:
        return None
    return (feats + (0.0,) * len(FEATURES))[:len(FEATURES)]   # a backend may count fewer


def spearman(xs, ys) -> float | None:
    """Rank correlation (ties get their average rank); None for fewer than 3 pairs or no spread."""
    if len(xs) < 3:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    if np.std(rx) == 0 or np.std(ry) == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(v) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    order = np.argsort(v, kind="stable")
    ranks = np.empty(len(v))
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2
        i = j + 1
    return ranks


@dataclass
class CostModel:
    """Coefficients for one device, the measurements they were fitted to, and the schedule
    factors: schedule name -> [sum of log(time / the program's first schedule's time), count]."""
    target: str
    device: str
    observations: list          # [features..., seconds, search]: search numbers the searches
    scales: tuple[float, ...]   # coefficient / default, per feature
    schedules: dict = field(default_factory=dict)

    @property
    def coefficients(self) -> tuple[float, ...]:
        return tuple(d * s for d, s in zip(DEFAULTS.get(self.target, DEFAULTS["cpu"]), self.scales))

    def predict(self, feats, schedule: str | None = None) -> float:
        """Seconds of the program with these features, under `schedule` (a name; None: its first)."""
        if feats is None:
            return math.inf
        seconds = float(sum(c * f for c, f in zip(self.coefficients, feats)))
        return seconds * self.factor(schedule, seconds)

    def factor(self, schedule: str | None, seconds: float | None = None, prior: float | None = None) -> float:
        """The schedule's time over the first schedule's, as measured on this device for
        programs predicted within the same power of ten of `seconds` where it was measured
        for at least SIZED_MIN of them (one thread beats two on a small program, whose thread
        handoffs cost more than its work, and loses on a large one), else for all, with
        `prior` (the backend's prediction for this program; None: 1) as one more measurement:
        it rules where nothing was measured, and keeps a single odd measurement from ruling."""
        if schedule is None:
            return 1.0
        decade = _decade(seconds)
        total, count = self.schedules.get(f"{schedule}@{decade}", (0.0, 0)) if decade is not None else (0.0, 0)
        if count < SIZED_MIN:
            total, count = self.schedules.get(schedule, (0.0, 0))
        guess = math.log(prior) if prior is not None and 0 < prior < math.inf else 0.0
        return math.exp((total + guess) / (count + 1))

    @property
    def source(self) -> str:
        n = len(self.observations)
        return f"fitted to {n} measured programs on this device" if n else "roofline defaults (nothing measured yet)"

    def observe(self, pairs, ratios=()) -> None:
        """Add (features, measured seconds) pairs and refit; add (schedule name, time over the
        same program's first schedule's time[, the program's predicted seconds]) ratios to the
        schedule factors."""
        search = max((row[-1] for row in self.observations), default=-1) + 1
        for feats, seconds in pairs:
            if feats is not None and seconds > 0 and math.isfinite(seconds):
                row = ([float(f) for f in feats] + [0.0] * len(FEATURES))[:len(FEATURES)]
                self.observations.append(row + [float(seconds), search])
        del self.observations[:-MAX_OBSERVATIONS]
        self.scales = fit_scales(self.target, self.observations)
        for name, ratio, *predicted in ratios:
            if not (ratio > 0 and math.isfinite(ratio)):
                continue
            decade = _decade(predicted[0]) if predicted else None
            for key in [name] + ([f"{name}@{decade}"] if decade is not None else []):
                total, count = self.schedules.pop(key, (0.0, 0))
                self.schedules[key] = [total + math.log(ratio), count + 1]   # (re-inserted: newest last)
        for name in list(self.schedules)[:-MAX_SCHEDULES]:
            del self.schedules[name]


def fit_scales(target: str, observations) -> tuple[float, ...]:
    """Ridge regression of relative error towards scale 1: minimize
    sum_i (sum_j s_j d_j f_ij / t_i - 1)^2 + RIDGE * sum_j (s_j - 1)^2, scales kept positive;
    kept only where it ranks the programs of each past search (what the search uses the
    prediction for) at least as well as the defaults: on the 2-core CPU a fit to 99 programs
    cut the median relative error from 3.2 to 0.24 yet ranked rmsnorm's and attention's
    programs worse, its weight moved from the counts that tell them apart onto bytes."""
    d = np.array(DEFAULTS.get(target, DEFAULTS["cpu"]))
    ones = tuple([1.0] * len(d))
    if not observations:
        return ones
    obs = np.array(observations, dtype=float)
    fitted = least_squares(d, obs)
    return fitted if _ranking(fitted, d, obs) >= _ranking(ones, d, obs) else ones


def least_squares(d: np.ndarray, obs: np.ndarray) -> tuple[float, ...]:
    a = obs[:, :len(d)] * d / obs[:, len(d), None]
    lhs = a.T @ a + RIDGE * np.eye(len(d))
    rhs = a.T @ np.ones(len(obs)) + RIDGE
    return tuple(float(max(x, 1e-3)) for x in np.linalg.solve(lhs, rhs))


def _ranking(scales, d, obs) -> float:
    """Mean rank correlation of predicted and measured time within each past search."""
    pred = obs[:, :len(d)] @ (d * np.array(scales))
    rhos = []
    for search in np.unique(obs[:, -1]):
        rows = obs[:, -1] == search
        rho = spearman(pred[rows], obs[rows, len(d)])
        if rho is not None:
            rhos.append(rho)
    return float(np.mean(rhos)) if rhos else 0.0


def _path(device: str, directory: str | None) -> str:
    from backends.base import cache_root
    root = directory or str(cache_root())
    digest = hashlib.sha256(device.encode()).hexdigest()[:16]
    return os.path.join(root, "costmodel", f"{digest}.json")


def load(target: str, device: str, directory: str | None = None) -> CostModel:
    """This device's model; a missing, damaged or foreign file gives the defaults ("": none kept)."""
    obs, schedules = [], {}
    try:
        if directory == "":
            raise OSError("not kept")
        with open(_path(device, directory)) as f:
            data = json.load(f)
        if data.get("device") == device and data.get("target") == target and data.get("features") == list(FEATURES):
            obs = [[float(x) for x in row] for row in data["observations"] if len(row) == len(FEATURES) + 2]
            schedules = {str(k): [float(v[0]), int(v[1])] for k, v in data.get("schedules", {}).items()
                         if math.isfinite(float(v[0])) and int(v[1]) > 0}
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        obs, schedules = [], {}
    return CostModel(target, device, obs, fit_scales(target, obs), schedules)


def save(model: CostModel, directory: str | None = None) -> None:
    """Write atomically; raises OSError when the cache cannot be written."""
    path = _path(model.device, directory)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = {"target": model.target, "device": model.device, "features": list(FEATURES),
            "observations": model.observations, "schedules": model.schedules}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
